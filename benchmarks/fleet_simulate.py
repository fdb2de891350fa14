"""The fleet frontier: our policy with forecast-sized node headroom against HPA + Karpenter, on shared NodePools.

``python -m benchmarks.fleet_simulate`` (writes the ``fleet-simulate`` section of docs/BENCHMARKS.md; ``--days N``
runs a shorter replay and writes nothing; ``--perf`` times a 20-Deployment, 14-day synthetic fleet instead).

The fleet: every multi-day trace in ``../shared/traces`` (its first ``DAYS`` days, cleaned as ``simulate`` cleans
them, replicas sized so the trace's peak needs 20, 1 GPU per replica), on one NodePool of 8-GPU nodes at
``NODE_USD`` an hour (the default GPU-hour price x 8), node start-up 180 s, pod start-up 120 s, Karpenter v1's
default ``consolidateAfter: 0s``, each Deployment's objective 99% of requests started within 2 s (60 s timeout),
bins replayed as ``simulate --bin-shape auto``. Runs:

* ``predictive (self-tuned)``: every Deployment on the default profile as the controller runs it (self-tuned daily
  for its objective); ``+ headroom``: plus forecast-sized node headroom for the pool
  (``autoscaler/engine/headroom.py``);
* ``predictive@Q``: the default profile pinned at one operating point (``warm_pool_quantile`` Q, ``POINTS``), with and
  without the headroom: the fleet's frontier, as the per-Deployment one is drawn;
* ``reactive@T``: HPA + Karpenter, one HPA per Deployment at target T (``TARGETS``), no buffer.

Every Deployment names its NodePool, so our policy observes the pool's free GPUs as the controller reads them and
plans a replica that fits on one with the pod start-up alone (``autoscaler/engine/deciding.py``).

Where the misses come from (``miss_causes``): each tick's requests that did not start within the objective's wait
(the queue's own replay, by arrival tick) are put down to the state of their Deployment at that tick: fewer replicas
asked for than the demand needs (*under-asked*; *after idle* when the ten minutes before averaged under a tenth of
a replica's capacity), enough asked but not Ready with a pod waiting for its node (*node wait*) or with every pod on
a node (*pod start-up*), or enough Ready (*backlog*: the queue left by an earlier shortfall, or a burst inside
the tick).

Reported, like the per-Deployment frontier (docs/BENCHMARKS.md, ``## frontier``), on the fleet's totals with GPU-hours
*as billed* (node-hours x 8: idle headroom nodes are paid for): (1) SLO misses cut at equal GPU-hours (the HPA
curve interpolated at the run's GPU-hours); (2) GPU-hours saved at equal attainment (the HPA curve's GPU-hours at
the run's attainment); the project's targets: >= 30% fewer GPU-hours at equal or better attainment, >= 90% fewer
SLO misses at equal GPU-hours. Beside them (``allocation_bound``, by the GPU-hours the pods held): the misses the
run cuts against one HPA target for the whole fleet, and what choosing one HPA target per Deployment, with
hindsight, would cut at the same GPU-hours: the part of a cut that running a point per Deployment gives without any
forecast.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import resource
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from autoscaler.commands.simulate_fleet import gpu_hours_at, hpa_builder, predictive_builder
from autoscaler.config.schema import Config, ForecastProfile
from autoscaler.simulation.engine import IntArray, PolicyResult, reactive_metric_at
from autoscaler.simulation.fleet import DeploymentSpec, FleetConfig, FleetRun, PoolSpec, run_fleet, tuning_notes
from autoscaler.simulation.queue import Segments, replay
from autoscaler.simulation.traffic import resolve, spread
from autoscaler.traces import load_trace
from benchmarks.report import machine, require_traces, update_section
from benchmarks.simulate import PEAK_REPLICAS, TRACES, multi_day
from models.clean import prepare
from models.types import SECONDS_PER_DAY, FloatArray

DAYS = 14
TARGETS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
POINTS = (80, 90, 95, 99)  # warm_pool_quantile, pinned (the self-tuner's bands)
SELF_TUNED = "predictive (self-tuned)"
HEADROOM = " + headroom"
CAUSES = ("pod start-up", "node wait", "under-asked", "under-asked after idle", "backlog")
IDLE_WINDOW_SECONDS = 600
GPUS_PER_NODE = 8
NODE_USD = Config().pricing.default_gpu_hour * GPUS_PER_NODE
SLO_WAIT, SLO_SHARE = 2.0, 0.99
SAVING_TARGET, MISS_CUT_TARGET = 0.30, 0.90
PERF_DEPLOYMENTS = 20

# Measured 2026-11-26 with the runs above; kept next to the code that prints it.
READING = """Reading the fleet frontier (measured 2026-11-27 on the one engine: every Deployment decides through the \
controller's `decide` on what the controller observes, the free GPUs of its NodePool included, the pool's node \
headroom is sized by the controller's own `pools_headroom`, its spare replicas lent by the controller's own \
`engine.spare` functions, and a scale-down of our policy removes the replicas the controller's `pod-deletion-cost` \
marks choose, those of the emptiest nodes first; the HPAs read the arrival rate of the last minute, as our \
controller does, and their Deployments keep the ReplicaSet's own order, newest first). **Both fleet targets are met \
by the self-tuned default with forecast-sized node headroom, the controller's default (`karpenter.headroom: auto`, \
`spare_replicas: true`): 19,663 billed GPU-hours for 99.977% of the fleet's \
work, at least 38% fewer GPU-hours than HPA + Karpenter needs for as much (its best, 99.746% at 0.3, costs 31,560) \
and 95% fewer misses than its curve at the same GPU-hours.** Without headroom the self-tuned default meets the \
GPU-hour target (14,942 GPU-h for 99.823%, at least 53% fewer, all four objectives met) but not the miss target \
(84%); p99 meets both (93%; 90% with headroom). **What moved in this run** (2026-11-27): when no point meets the \
objective, a forecast band runs as the safest point only if it cuts a quarter of the HPA's safest point's misses \
(`simulation.tuning.choose`, `BAND_MISS_SHARE`): the Alibaba LoRA Deployment, whose objective no point meets, ran the \
HPA's 0.5 started early on one day instead of p80 with the floor at 0.75 (99.878% to 99.865% with headroom), and \
the fleet went from 19,635 GPU-h at 99.978% (96%) to 19,663 at 99.977% (95%); the pinned points did not move. \
**The run before**: a pool's headroom covers the quantile \
of its error that its Deployments' strictest objective names (`engine.headroom.objective_quantile`: p99 for these \
99% objectives, at most p99), not p95: a pool whose Deployments promise 99% on time cannot run short of nodes in \
one node lead of twenty. The self-tuned default with headroom went from 17,896 GPU-h at 99.965% (94% fewer misses, \
at least 43% fewer GPU-hours) to 19,635 at 99.978% (96%, at least 38%): its missed work fell from 0.035% to \
0.022% of the fleet's for 9.7% more billed GPU-hours. On the smaller nodes, where the miss target had failed (the \
same fleet, `--gpus-per-node`, which writes nothing), it is now met: 4-GPU nodes from 16,602 GPU-h at 99.933% \
(89%, at least 43%) to 18,380 at 99.969% (94%, at least 37%), 2-GPU nodes from 16,538 at 99.885% (81%, at least \
40%) to 18,209 at 99.959% (92%, at least 34%); p98, measured beside it, 96% / 96% / 90% of the misses cut on 8-, \
4- and 2-GPU nodes (at least 40% / 40% / 36% fewer GPU-hours). On `--perf`'s synthetic fleet the standing against \
its HPA curve barely moved (p95: 80,414 GPU-h at 99.746%, 61% and 26%; p98: 83,223 at 99.778%, 62% and 27%; p99: \
85,519 at 99.792%, 61% and 27%). The pinned points pay for more idle room without the tuner's choices (with \
headroom p80 -90%, p90 6%, p95 72%). **The run before**: the tuner's first two replays choose the \
cheapest point meeting the objective among the HPA's own points only (`simulation.tuning.decide`, \
`MIN_BAND_DAYS`); NASA's first tunings now run the HPA's point at 0.6 started early where they ran p90, and the \
self-tuned default with headroom went from 17,803 GPU-h at 99.958% (93%, at least 44%) to 17,896 at 99.965% (94%, \
at least 43%), without headroom from 14,944 at 99.823% to 14,977 at 99.830% (84% either way). **Before that: \
spares fill the room the node headroom keeps** (`engine.spare`, on with `karpenter.spare_replicas`). The pool \
pays for the idle nodes its headroom holds \
for scale-ups, and they stood empty: the pool now lends its buffer rounded up to whole nodes (on its busy nodes and \
the headroom's Ready idle nodes) to spare replicas of its most exposed Deployments; the headroom is sized on the \
plan first, and its placeholders hold only the idle nodes the spares leave empty (0.15 on average, from 0.79), so \
Karpenter adds no node for them; a scale-up takes a spare's GPU back as it would a placeholder's. The self-tuned \
default with headroom went from 17,226 GPU-h at 99.895% (84% fewer misses, at least 45% fewer GPU-hours) to \
17,803 at 99.958% (93%, at least 44%): its missed work fell from 0.105% to 0.042% of the fleet's (by three \
fifths) for 3.3% more billed GPU-hours. The buffer's room on busy nodes is what pays: a variant that lent only the \
last node's remainder and whole idle headroom nodes, 17,170 GPU-h at 99.886% (83%), since a node of spares then \
counts as busy and its spares went back at the next lending. **It holds on other node sizes** (`--gpus-per-node`, \
which writes nothing; the same fleet and runs): with 4-GPU nodes the self-tuned default with headroom went from \
15,932 GPU-h at 99.534% (33% fewer misses, 17% fewer GPU-hours) to 16,261 at 99.797% (70%, at least 44%), with \
2-GPU nodes from 16,293 at 99.352% (-3%, -1%: dominated by the HPA's curve) to 16,414 at 99.632% (40%, 29%); the \
90% target is met on neither (small nodes make every scale-up wait for a node: node waits are 15-28% of what is \
left), and without headroom the self-tuned default cuts 37% (4 GPUs) and -10% (2 GPUs) of the misses. With the \
first days' gate (the run before this one): 16,602 GPU-h at 99.933% on 4-GPU nodes (89% fewer misses, at least \
43% fewer GPU-hours) and 16,538 at 99.885% on 2-GPU nodes (81%, at least 40%); without headroom 68% and 50% of \
the misses cut. ServeGen m_small moved most (4-GPU nodes, without headroom: 98.46% to 99.79%). **And a \
decision now plans on its Deployment's own \
replicas** (`engine.deciding.Observed`: the spares its pool lent it excepted, in the controller and the \
simulator): counted as its own, the rules that keep the current count (the lead gap, the scale-down step limit) \
turned spares into planned replicas and kept the nodes they stood on; with the headroom filled that ratchet cost \
4% more GPU-hours for 0.02 points (18,509 GPU-h at 99.977%, 96% against the HPA curve: a larger warm pool nobody \
chose, which no decision could explain), and every pinned point paid it: p80 12,596 GPU-h at 98.308% -> \
12,281 at 98.292% (29% -> 61% fewer misses), p95 14,494 at 99.773% -> 14,348 at 99.766% (81%), p99 18,015 at \
99.959% -> 17,943 at 99.954% (93%); the self-tuned default without headroom moved from 14,970 at 99.852% (86%) \
to 14,944 at 99.823% (84%), its tuner's choices the same. The pinned points with headroom pay for idle room \
without the self-tuner's choices (p80 -40%, p90 22%, p95 73% with headroom, against 61%, 60%, 81% without). The \
HPA rows do not move: HPAs are lent nothing (a Deployment with no forecast takes no spares, and the HPA + \
Karpenter baseline leaves the remainder idle, as it does in a cluster). The runs before: **spare replicas on the \
last node's remainder** (Karpenter bills whole nodes: the self-tuned run had paid 13% of its bill for GPUs no pod \
held) moved the self-tuned default from 14,374 GPU-h at 99.583% (67%) to 14,970 at 99.852% (86%); **the tuner's \
self-check** (`simulation.tuning.decide`) from 14,488 at 99.607% to 14,374 at 99.583%; **scale-in that empties \
whole nodes** (`domain.scaledown`, the controller's marks; `simulation.cluster`'s `EMPTIEST_NODE_FIRST`) cut \
10.8% of the billed GPU-hours (16,246 -> 14,488) for 0.03 points of attainment. The HPA + Karpenter baseline \
consolidates empty nodes only (`WhenEmpty`, what GPU inference pools commonly set, because moving a pod costs a \
model load); Karpenter v1's default, `WhenEmptyOrUnderutilized`, would also repack the HPA's half-used nodes by \
evicting pods, each eviction a cold start, which the simulator models for neither side. **Where the misses come \
from**: self-tuned, pod start-up (replicas asked for but still loading) 35%, node waits 25%, the backlog an \
earlier shortfall leaves 32%; with headroom, pod start-up 50% of an eighth as much. What is left needs Ready \
replicas before bursts no forecast sees, or starts faster than 120 s. Not modelled: a pod Pending for the GPU a \
spare of another Deployment gives back waits for the spare's graceful termination, and Karpenter launches a node \
for a pod Pending behind a terminating one (aws/karpenter-provider-aws#3729; consolidated once empty), which now \
applies to the headroom's room as well. **What choosing a target per Deployment alone could cut** (added 2026-11-27, \
`allocation_bound`; the runs unchanged): one HPA target for the whole fleet is what the targets are measured \
against, and a Deployment that runs a point of its own gains on it without any forecast. With hindsight no \
controller has, the best choice of one HPA target per Deployment (from the targets' own runs, by the GPU-hours the \
pods held) cuts 53% of the fleet-wide HPA's misses at the self-tuned default's 13,646 replica GPU-hours, where the \
self-tuned default cuts 74%, and 41% at the 17,751 of the default with headroom, which cuts 95%: on the traces the \
forecast and the pool cut beyond what allocation could. The seconds of this run are the machine's: the same code's \
`--perf` run used three times the CPU of the day before (below), and the rows are as before."""

# Measured 2026-11-26 with --perf on the project's shared 2-core machine (before and after in one session, twice).
PERF_READING = """Run time (`python -m benchmarks.fleet_simulate --perf`: 20 synthetic Deployments, diurnal, bursty \
and flat shapes on two NodePools, 14 days, our policy self-tuned with headroom), measured 2026-11-26 on the shared \
machine with the code before the last speed-ups and after them, one run after the other, twice: before, 195 and 197 s \
wall, 298 and 302 s of CPU (96 s in the fleet's process, 202-207 s in two worker processes that run the self-tuning \
replays, `--jobs 2`, the default); **after, 182 and 172 s wall, 282 and 272 s of CPU (85 and 76 s + 197 and 196 s)**, \
the first pair at load average 1.5-1.8 on its 2 cores, the second at 0.7-1.6; 78,826 billed GPU-h at 99.477% in all \
four, and every decision, forecast and tuning the same (hashed on a 3-day fleet and on one trace's self-tuned \
frontier). **The target (under 3 minutes on 2 cores) is met, narrowly: 172 s in the quieter pair, 182 s in the \
other.** The wall time is about the fleet's own CPU plus half the replays' (76 + 196 / 2 = 174 s): the replays that \
fall due at one tick (every Deployment refits, and so tunes, on the same day) all start before any Deployment decides, \
each whole in one of the two workers, and the fleet waits for them at that tick, after its decisions (each choice runs \
from the next decision, as in the controller); between tunings only the fleet's process runs. What moved: the fleet's \
traffic was drawn with a token length for every request, which nothing here reads (5 s of the fleet's process; \
`synth_trace(tokens=False)` draws the same requests alone); a fleet's decisions keep no planner steps (nothing in a \
fleet reads them; with them, a decision whose new replicas may fit on free GPUs planned its node-lead count with steps \
too); the lead-only point's median is read from the band's list, not through a numpy index at every decision; a \
model's update sanitizes its bin without entering a numpy errstate. What remains: the fleet's own process (forecasts \
about two fifths of it: a chain update and predict per bin; decisions, with two plans where free GPUs may take the new \
replicas, and cluster, bill and headroom the rest), which runs while the workers idle, and the replays' closed loops \
(the planner about half of them). The Deployments share nodes at every tick, so their forecasts and decisions stay in \
one process. **Re-measured after the tuner's start point was merged with these speed-ups** (same day, quiet machine, \
load average 0.7 before and 1.8 after): 166 s wall, 263 s of CPU (72 s + 190 s), 78,850 billed GPU-h at 99.471% (the \
start point moves the decisions of each Deployment's first two days). **Re-measured after the emptiest-node scale-in** \
(quiet machine, load average 0.04 at the start): 167 s wall, 263 s of CPU (73 s + 190 s), 78,169 billed GPU-h at \
99.466% (0.9% fewer: with headroom on, the pools keep idle nodes anyway). **Re-measured with the tuner's self-check** \
(load average 1.0 at the start: a helper had just finished): 174 s wall, 274 s of CPU (78 s + 196 s), 76,552 billed \
GPU-h at 99.419%; the self-check replays nothing more, and the run stays under the 180 s target. **Re-measured with \
the spare replicas** (`engine.spare`; load average 0.4 at the start): 177 s wall, 276 s of CPU (82 s + 193 s), 76,927 \
billed GPU-h at 99.533%; the lending adds about 6% to the fleet's own process (one run at load average 1.2, before the \
lending reused the headroom's read of the pools: 181 s, 84 s + 197 s), and the run stays under the 180 s target, \
narrowly. After the review that made one lending function of the two drivers' wiring (the same decisions): 178 s, 277 \
s of CPU (82 s + 195 s); a run just before it, with a dataclass made per Deployment at every decision, took 195 s (95 \
s + 205 s: the workers, whose code did not change, 5% slower too, so part of it was the machine). **Re-measured with \
spares in the headroom's room and decisions on their own replicas** (2026-11-26, load average 0.9-1.0 at the start): \
197 s wall, 304 s of CPU (94 s + 210 s), 79,514 billed GPU-h at 99.719% (from 76,927 at 99.533%), and 194 s (90 s + \
212 s) in a later run; the code before these changes, run between them on the same machine: 195 s (93 s + 206 s), \
where it had taken 178 s the day before. **So the target is not met on this machine today, by the old code or the \
new** (the change costs about 1%: more replicas to simulate and the lending's larger slack); the replays, which run as \
the controller runs them (within the tick, their choice from the next decision), are two thirds of the CPU. **This \
fleet is a second reading of the fleet targets** (`--perf` now runs the HPA targets on it after the timing): against \
HPA + Karpenter there, the self-tuned default with headroom cut 58% of the misses at equal GPU-hours and needs 25% \
fewer GPU-hours at equal attainment (79,514 GPU-h at 99.719%); before spares filled the headroom's room, 35% and 13% \
(76,927 at 99.533%, scored against the same HPA runs). So the change holds on a fleet it was not designed on, and on \
this one neither target is met: its synthetic shapes (a diurnal cycle, bursts, a flat series, a peak of 20 replicas \
each) leave the HPA at 0.5 (88,318 GPU-h at 99.528%) less to save than the traces do. Per Deployment (a run of this \
fleet before the gate below, with the HPA at 0.4, 0.5 and 0.6 beside it): on the seven flat series the self-tuned \
default runs leaner than the HPA at 0.6 (5,598-6,323 GPU-h against 6,558-7,123) and misses 0.06-0.17% where the HPA at \
0.6 misses nothing; on the seven bursty ones it spends 1.6-1.9x the HPA at 0.5 to attain 98.4-99.5% (the HPA at 0.5: \
96.0-96.6%); on the six diurnal ones it is on the HPA's curve (2,197-3,152 GPU-h at 99.27-99.76%, the HPA at 0.5: \
2,190-3,419 at 99.44-99.82%). Each Deployment's tuner meets its own 99% objective at the least cost, which leaves the \
fleet at about 99.7%: 90% fewer misses than the HPA's curve at equal GPU-hours would need about 99.93%, a tighter \
objective than these Deployments state. **Re-measured with the tuner's first days' gate** (2026-11-26, load average \
0.5 at the start): 190 s wall, 295 s of CPU (87 s + 208 s), 80,414 billed GPU-h at 99.746%; the code before it, \
earlier the same day: 183 s (81 s + 201 s), 79,514 at 99.719%. Against HPA + Karpenter on this fleet: 61% fewer misses \
at equal GPU-hours and 26% fewer GPU-hours at equal attainment (58% and 25% before). **Re-measured with the headroom \
at the objective's quantile** (2026-11-27; p99 for these 99% objectives): 230 s wall, 354 s of CPU (109 s + 245 s), \
85,519 billed GPU-h at 99.792%, 61% fewer misses and 27% fewer GPU-hours than the HPA + Karpenter curve; the code \
before it (p95), earlier the same day: 234 s (111 s + 250 s), 80,414 at 99.746%, 61% and 26%. The run time is the \
machine's (every part about a fifth slower than on 2026-11-25), not the change's: the 180 s target is not met today by \
either. **Re-measured later that day** with a forecast band held to a quarter of the HPA's misses when nothing meets \
the objective (`tuning.choose`): 219 s wall, 341 s of CPU (104 s + 237 s), and the same 85,519 billed GPU-h at 99.792% \
(61% and 27%): the bursty Deployments' p99 cuts far more than a quarter of the misses of the HPA's 0.5 started early \
there, so no choice moved. **Re-measured without the tuner's margin** (`tuning.DEFAULT_MARGIN`, 2026-11-27, started \
right after the traces' fleet run, load average about 1.7): 221 s wall, 342 s of CPU (104 s + 238 s), 85,453 billed \
GPU-h at 99.792% (61% and 27%; 66 GPU-h fewer than with the margin, the same attainment to the thousandth), the run \
time as before. The traces' fleet above made the same choices (the same rows; only the seconds moved). \
**Re-measured 2026-11-27, later** (the same decisions: 85,453 billed GPU-h at 99.792%, 61% and 27%): 680 s wall, \
1,027 s of CPU (324 s + 704 s), three times the CPU of the run before with no change to what it runs: the machine, \
that evening, and no reading of the run time. **What choosing a target per Deployment alone could cut on this \
fleet** (`allocation_bound`, printed after the HPA runs): at the self-tuned default's 80,405 replica GPU-hours (with \
headroom) one HPA target fleet-wide misses 0.458% of the work and the default 0.208% (55% cut, by replica GPU-hours); \
the best choice of one target per Deployment, with hindsight, misses 0.126% (72% cut): the HPA at 0.3 on the seven \
bursty Deployments, 0.4 on the diurnal ones, 0.6-0.7 on the flat ones. So on these shapes the self-tuned default \
cuts less than allocation alone could, and the 90% target lies beyond allocation too (72-74% at 80,000-85,000 \
replica GPU-hours). Why the tuner does not allocate so: each Deployment meets its own objective at the least cost, \
and the hindsight choice over-serves the diurnal and flat Deployments (99.9-100%) where misses are cheap to cut \
and runs the bursty ones at the HPA's 0.3; replayed on single Deployments (`benchmarks/tuner_rules.py`'s draws 1-8, \
recorded with 0.3 and 0.4 among the points), both moves leave more fortnights dominated by an HPA target \
(`tuning.DEFAULT_HPA_TARGETS` says by how much)."""


def fleet(days: float, gpus_per_node: int = GPUS_PER_NODE) -> FleetConfig:
    """The benchmark's fleet from the real traces (module docstring)."""
    deps = []
    for path in sorted(p for p in TRACES.glob("*.csv") if multi_day(p)):
        series = prepare(load_trace(path).requests)
        series = series.slice(0, min(len(series), int(days * SECONDS_PER_DAY // series.step_seconds)))
        peak = float(np.nanmax(series.values))
        deps.append(DeploymentSpec(path.stem, series, "gpu", peak / PEAK_REPLICAS, max_replicas=4 * PEAK_REPLICAS,
                                   team=path.stem.split("_")[0], slo_wait_seconds=SLO_WAIT,
                                   slo_attainment=SLO_SHARE))
    node_usd = Config().pricing.default_gpu_hour * gpus_per_node
    return FleetConfig(tuple(deps), (PoolSpec("gpu", gpus_per_node, node_usd, 180, 0),))


def perf_fleet(days: float, n: int = PERF_DEPLOYMENTS) -> FleetConfig:
    """``n`` synthetic Deployments (diurnal, bursty and flat shapes, seeds 1..n) on two NodePools."""
    from autoscaler.synth import synth_trace

    shapes = ("diurnal", "bursty", "flat")
    deps = []
    for i in range(n):
        series = synth_trace(days=days, seed=i + 1, shape=shapes[i % 3], tokens=False).requests
        peak = float(np.nanmax(series.values))
        deps.append(DeploymentSpec(f"synth-{i + 1}", series, ("a", "b")[i % 2], peak / PEAK_REPLICAS,
                                   max_replicas=4 * PEAK_REPLICAS, team=f"team-{i % 4}"))
    return FleetConfig(tuple(deps), (PoolSpec("a", GPUS_PER_NODE, NODE_USD, 180, 0),
                                     PoolSpec("b", GPUS_PER_NODE, NODE_USD, 180, 0)))


Job = tuple[str, float, bool, float, bool, int]


def one_run(job: Job, executor: Executor | None = None) -> FleetRun:
    """One policy over the fleet (in a worker process): ``(policy, target or point, perf fleet?, days, headroom?,
    GPUs per node of the traces' fleet)``;
    policy ``reactive`` (HPA at ``target``), ``pinned`` (the default profile at ``warm_pool_quantile`` ``target``) or
    ``tuned`` (the default profile, self-tuned); ``executor``: a pool of worker processes where the self-tuning
    replays run, those due at the same tick at once (the same choices)."""
    kind, target, perf, days, headroom, gpus_per_node = job
    config = perf_fleet(days) if perf else fleet(days, gpus_per_node)
    if kind == "reactive":
        return run_fleet(config, hpa_builder(target), f"reactive@{target:g}")
    profile = ForecastProfile()
    name = SELF_TUNED
    if kind == "pinned":
        q = int(target)
        profile = replace(profile, self_tune=False, warm_pool_quantile=q, quantile=min(profile.quantile, q))
        name = f"predictive@{q}"
    build = predictive_builder(profile, Config().loop.interval_seconds, profile.model, executor)
    return run_fleet(config, build, name + (HEADROOM if headroom else ""), headroom=headroom)


def _tick_misses(demand: FloatArray, ready: IntArray, capacity: float, tick: int, slo_wait: float,
                 timeout: float) -> FloatArray:
    """Requests that did not start within ``slo_wait``, by the tick they arrived in (the scoring queue's replay)."""
    segments = Segments(demand, tick, timeout)
    out = replay(segments, ready.astype(np.float64) * capacity)
    lo, hi = out.wait_lo, out.wait_hi
    flat = hi - lo <= 1e-12
    within = np.where(flat, (lo <= slo_wait).astype(np.float64),
                      np.clip((slo_wait - lo) / np.where(flat, 1.0, hi - lo), 0.0, 1.0))
    missed = out.piece_mass - out.piece_served * within
    arrived = np.concatenate(([0.0], np.cumsum(out.piece_mass)))[:-1]
    at = np.clip(np.searchsorted(segments.cum_arrivals, arrived, side="right") - 1, 0, len(demand) - 1)
    per_tick = np.zeros(len(demand))
    np.add.at(per_tick, at, missed)
    return per_tick


def miss_causes(run: FleetRun, config: FleetConfig) -> dict[str, float]:
    """The fleet's missed work (replica-hours of demand whose requests missed their objective) by cause (``CAUSES``;
    module docstring), as shares of the fleet's work."""
    tick, n = config.tick_seconds, config.ticks()
    work = sum(d.work_hours for d in run.deployments)
    out = dict.fromkeys(CAUSES, 0.0)
    for d in run.deployments:
        spec = d.spec
        demand = spread(spec.series.values, spec.series.step_seconds // tick,
                        resolve(config.bin_shape, spec.series.step_seconds))[:n]
        missed = _tick_misses(demand, d.result.ready, spec.capacity_per_replica, tick, spec.slo_wait_seconds,
                              config.timeout_seconds) / spec.capacity_per_replica / 3600.0
        rate = np.nan_to_num(demand, nan=0.0)
        need = np.ceil(rate / spec.capacity_per_replica - 1e-9)
        window = max(1, IDLE_WINDOW_SECONDS // tick)
        cum = np.concatenate(([0.0], np.cumsum(rate)))
        idx = np.arange(n)
        before = (cum[idx] - cum[np.maximum(0, idx - window)]) / np.maximum(1, np.minimum(idx, window))
        waits = d.node_waits if d.node_waits is not None else np.zeros(n, dtype=np.int64)
        asked, ready = d.result.requested, d.result.ready
        idle = before < 0.1 * spec.capacity_per_replica
        under = asked < need
        starting = ~under & (ready < need)
        shares = {
            "under-asked after idle": under & idle, "under-asked": under & ~idle,
            "node wait": starting & (waits > 0), "pod start-up": starting & (waits == 0),
            "backlog": ~under & ~starting,
        }
        for cause, mask in shares.items():
            out[cause] += float(missed[mask].sum()) / work if work > 0 else 0.0
    return out


def _replica_points(run: FleetRun) -> list[tuple[float, float]]:
    """Each Deployment of ``run``: (GPU-hours its pods held, its missed work in replica-hours)."""
    return [(d.result.gpu_hours, d.work_hours * (1.0 - d.result.slo_attainment)) for d in run.deployments]


def allocation_bound(hpa: Sequence[FleetRun], gpu_hours: float) -> tuple[float, float] | None:
    """The fewest missed replica-hours of work that choosing one of ``hpa``'s targets *per Deployment*, with hindsight,
    reaches on at most ``gpu_hours`` of replica GPU-hours, and the GPU-hours that choice holds (``best_mix``); None
    when the cheapest choice holds more. Why: the fleet target compares us with one HPA target for the whole fleet,
    and a Deployment that runs its own point gains on that without any forecast; this is what choosing among the
    targets' own runs alone reaches, with hindsight no controller has: a run that cuts more gains from more than
    choosing its points well. Each Deployment's point is taken from its run as if the others had not changed, which
    the shared pool makes an approximation (node waits differ)."""
    return best_mix(list(zip(*(_replica_points(r) for r in hpa), strict=True)), gpu_hours)


def best_mix(options: Sequence[Sequence[tuple[float, float]]], budget: float) -> tuple[float, float] | None:
    """One of each item's ``(cost, misses)`` options: the fewest summed misses at a summed cost within ``budget``, and
    that cost; None when the cheapest choice costs more. Exact: the items are added one at a time, keeping only the
    choices no other beats on both sums (on 20 Deployments and 7 targets a few thousand)."""
    if not options:
        return None
    front = [(0.0, 0.0)]
    for points in options:
        merged = sorted((g + pg, m + pm) for g, m in front for pg, pm in points if g + pg <= budget + 1e-9)
        front = []
        for g, m in merged:
            if not front or m < front[-1][1] - 1e-12:
                front.append((g, m))
        if not front:
            return None
    return min(front, key=lambda gm: (gm[1], gm[0]))


def uniform_miss_share_at(hpa: Sequence[FleetRun], gpu_hours: float) -> float:
    """The share of the fleet's work one HPA target for the whole fleet misses, interpolated at ``gpu_hours`` of
    replica GPU-hours (the nearest target outside their range)."""
    runs = sorted((r.gpu_hours, 1.0 - r.slo_attainment) for r in hpa)
    return float(np.interp(gpu_hours, [g for g, _ in runs], [m for _, m in runs]))


def allocation_text(run: FleetRun, hpa: Sequence[FleetRun]) -> str | None:
    """One line: the misses ``run`` cuts against the fleet-wide HPA at its replica GPU-hours, beside what choosing a
    target per Deployment with hindsight cuts there (``allocation_bound``); None when that choice cannot be had."""
    work = sum(d.work_hours for d in run.deployments)
    mine = 1.0 - run.slo_attainment
    bound = allocation_bound(hpa, run.gpu_hours)
    uniform = uniform_miss_share_at(hpa, run.gpu_hours)
    if bound is None or work <= 0 or uniform <= 0:
        return None
    share = bound[1] / work
    return (f"{run.name}: at its {run.gpu_hours:,.0f} replica GPU-h it misses {_pct(mine)} of the work, against "
            f"{_pct(uniform)} for one HPA target fleet-wide ({_pct(1.0 - mine / uniform, 0)} cut); the HPA "
            f"targets chosen per Deployment with hindsight, {_pct(share)} on {bound[0]:,.0f} "
            f"({_pct(1.0 - share / uniform, 0)} cut)")


def _pct(x: float, digits: int = 3) -> str:
    return f"{100 * x:.{digits}f}%"


def compare(run: FleetRun, hpa: list[PolicyResult]) -> tuple[float, float, bool]:
    """(SLO misses cut against the HPA curve at the run's billed GPU-hours, GPU-hours saved at the run's attainment,
    whether that saving is a lower bound); nan where the run is outside the curve. Beyond the curve's best
    attainment, the saving is against the target that attains most, when the run attains more for fewer GPU-hours
    (the curve needs at least that many GPU-hours there): a lower bound."""
    mine = run.as_policy_result()
    xs = [h.gpu_hours for h in hpa]
    cut = math.nan
    if min(xs) <= mine.gpu_hours <= max(xs):
        att = reactive_metric_at(mine.gpu_hours, hpa, "slo_attainment")
        if att is not None and att < 1:
            cut = 1.0 - (1.0 - mine.slo_attainment) / (1.0 - att)
    equal = gpu_hours_at(mine.slo_attainment, hpa)
    if equal is not None:
        return cut, 1.0 - mine.gpu_hours / equal, False
    best = max(hpa, key=lambda h: (h.slo_attainment, -h.gpu_hours))
    if mine.slo_attainment > best.slo_attainment and mine.gpu_hours < best.gpu_hours:
        return cut, 1.0 - mine.gpu_hours / best.gpu_hours, True
    return cut, math.nan, False


def _saved_text(saved: float, bound: bool) -> str:
    if not math.isfinite(saved):
        return "curve does not reach it"
    return f">= {_pct(saved, 0)} (beyond the curve)" if bound else _pct(saved, 0)


def markdown(runs: list[FleetRun], config: FleetConfig, seconds: float, days: float) -> str:
    hpa_runs = [r for r in runs if r.name.startswith("reactive@")]
    hpa = [r.as_policy_result() for r in hpa_runs]
    names = ", ".join(d.name for d in config.deployments)
    gpn, node_usd = config.pools[0].gpus_per_node, config.pools[0].node_usd_per_hour
    lines = [
        "## fleet simulate", "",
        f"`python -m benchmarks.fleet_simulate`: a fleet of {len(config.deployments)} Deployments ({names}; the "
        f"first {days:g} days of each trace, replicas sized so its peak needs {PEAK_REPLICAS}, 1 GPU each) on one "
        f"NodePool of {gpn}-GPU nodes at ${node_usd:g}/node-hour, node start-up 180 s, pod start-up 120 s, "
        "Karpenter v1's default `consolidateAfter: 0s`; every Deployment's objective is 99% of requests started "
        "within 2 s (60 s timeout). Every Deployment names its NodePool, so our policy reads the pool's free GPUs "
        "as the controller does and plans a replica that fits on one with the pod start-up alone "
        "(`autoscaler/engine/deciding.py`). *predictive (self-tuned)*: the default profile self-tuned daily per "
        "Deployment; *predictive@Q*: the default profile pinned at `warm_pool_quantile` Q "
        f"({', '.join(map(str, POINTS))}), the fleet's frontier; *+ headroom*: plus forecast-sized node headroom "
        "for the pool "
        "(`autoscaler/engine/headroom.py`, the pool's summed-forecast error at the node lead, at the quantile its "
        "Deployments' strictest objective names: p99 here); *reactive@T*: "
        "HPA + Karpenter (one HPA per Deployment at target T, pods that do not fit wait for a node). GPU-hours are "
        f"**as billed**: node-hours x {gpn} (idle nodes included); *replica GPU-h* is what the pods held. "
        "*SLO attained*: the share of the fleet's work (replica-hours of demand) started within its objective's "
        "wait, so that each Deployment weighs what it costs to serve (ServeGen counts a million requests a bin, NASA "
        "a few dozen; weighted by requests the fleet would be ServeGen alone); *per request*: weighted by requests. "
        "*Misses cut*: against the HPA + Karpenter curve interpolated at the same billed GPU-hours; *GPU-h saved*: "
        "against the GPU-hours that curve needs for the same attainment (beyond its best attainment, against the "
        "target that attains most: a lower bound).", "",
        "| policy | billed GPU-h | replica GPU-h | node-h | $ billed | SLO attained | per request | objectives met "
        "| misses cut at equal GPU-h | GPU-h saved at equal attainment | sim s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for r in runs:
        show = r not in hpa_runs
        cut, saved, bound = compare(r, hpa) if show else (math.nan, math.nan, False)
        lines.append(
            f"| {r.name} | {r.billed_gpu_hours:,.0f} | {r.gpu_hours:,.0f} | {r.node_hours:,.0f} | "
            f"{r.cost_usd:,.0f} | {_pct(r.slo_attainment)} | {_pct(r.requests_slo_attainment)} | "
            f"{r.objectives_met}/{len(r.deployments)} | "
            f"{(_pct(cut, 0) if math.isfinite(cut) else 'outside the curve') if show else ''} | "
            f"{_saved_text(saved, bound) if show else ''} | {r.seconds:.0f} |")
        if show:
            verdicts.append(
                f"{r.name}: >= 30% fewer GPU-hours at equal attainment "
                f"{'PASS' if math.isfinite(saved) and saved >= SAVING_TARGET else 'FAIL'}; >= 90% fewer SLO misses "
                f"at equal GPU-hours {'PASS' if math.isfinite(cut) and cut >= MISS_CUT_TARGET else 'FAIL'}")
    lines += ["", "Where the misses come from (the module docstring of `benchmarks/fleet_simulate.py` says how each "
              "missed request is put down to a cause), as shares of the fleet's work:", "",
              "| policy | missed | " + " | ".join(CAUSES) + " |", "|---|---|" + "---|" * len(CAUSES)]
    for r in runs:
        causes = miss_causes(r, config)
        total = sum(causes.values())
        lines.append(f"| {r.name} | {_pct(total)} | " + " | ".join(
            f"{_pct(v)} ({100 * v / total:.0f}%)" if total > 0 else _pct(v) for v in causes.values()) + " |")
    lines += ["", "Per Deployment (SLO attained; GPU-h its pods held):", "",
              "| policy | " + " | ".join(d.name for d in config.deployments) + " |",
              "|---|" + "---|" * len(config.deployments)]
    for r in runs:
        lines.append(f"| {r.name} | " + " | ".join(
            f"{_pct(d.result.slo_attainment)}, {d.result.gpu_hours:,.0f}" for d in r.deployments) + " |")
    lines += ["", *[f"- {v}" for v in verdicts], ""]
    lines += ["What choosing a target per Deployment alone could cut (by the GPU-hours the pods held, not as billed: "
              "a Deployment's share of a node is not billed apart; `allocation_bound`):", "",
              *[f"- {t}" for r in runs if r not in hpa_runs and (t := allocation_text(r, hpa_runs)) is not None], ""]
    lines += [f"- {n}" for n in tuning_notes(runs)]
    for r in runs:
        for pool, idle in r.headroom_nodes.items():
            lines.append(f"- {r.name}: NodePool {pool} held {float(idle.mean()):.2f} idle headroom node(s) empty on "
                         f"average (most {int(idle.max())}; spare replicas stood on the rest of its room)")
    lines += ["", f"Whole run: {seconds:.0f} s (runs 2 at a time). Machine: {machine()}.", "", READING, "",
              PERF_READING]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--days", type=float, default=DAYS, help=f"days replayed (default {DAYS}; other values "
                        "write nothing)")
    parser.add_argument("--gpus-per-node", type=int, default=GPUS_PER_NODE, help=f"the traces' NodePool's node size "
                        f"(default {GPUS_PER_NODE}; other values write nothing)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (default 2); with --perf, 2 or more runs "
                        "the self-tuning replays in that many worker processes")
    parser.add_argument("--perf", action="store_true", help=f"time one predictive run (with headroom) of "
                        f"{PERF_DEPLOYMENTS} synthetic Deployments over --days instead, then compare it with the "
                        "HPA targets on that fleet (not timed)")
    args = parser.parse_args(argv)
    if args.perf:
        # The Deployments share nodes at every tick, so the fleet runs in this process; with --jobs 2 or more, the
        # self-tuning replays run in that many worker processes, those due at one tick at once (the same choices,
        # exactly: each is applied at the tick it fell due, as in one process).
        t0, c0 = time.perf_counter(), time.process_time()
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        with contextlib.ExitStack() as stack:
            executor = (stack.enter_context(ProcessPoolExecutor(max_workers=args.jobs)) if args.jobs >= 2
                        else None)
            run = one_run(("tuned", 0.0, True, args.days, True, GPUS_PER_NODE), executor)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        worker = (children.ru_utime + children.ru_stime) - (children0.ru_utime + children0.ru_stime)
        how = (f"the fleet in one process, its self-tuning replays in {args.jobs} workers" if executor
               else "one process")
        print(f"{PERF_DEPLOYMENTS} Deployments x {args.days:g} days, predictive + headroom: {seconds:.0f} s wall, "
              f"{cpu + worker:.0f} s CPU ({how}: {cpu:.0f} s + {worker:.0f} s) "
              f"(billed GPU-h {run.billed_gpu_hours:,.0f}, SLO attained {_pct(run.slo_attainment)}); "
              f"machine: {machine()}")
        # the same fleet under HPA + Karpenter, after the timing: a second fleet to read the targets on
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            hpa_jobs: list[Job] = [("reactive", t, True, args.days, False, GPUS_PER_NODE) for t in TARGETS]
            hpa_runs = list(pool.map(one_run, hpa_jobs))
        hpa = [r.as_policy_result() for r in hpa_runs]
        cut, saved, bound = compare(run, hpa)
        print("against HPA + Karpenter on this fleet ("
              + ", ".join(f"{h.name} {h.gpu_hours:,.0f} GPU-h at {_pct(h.slo_attainment)}" for h in hpa)
              + f"): {_pct(cut, 0)} fewer misses at equal GPU-hours, {_saved_text(saved, bound)} fewer GPU-hours at "
              "equal attainment")
        if (allocation := allocation_text(run, hpa_runs)) is not None:
            print(f"what choosing a target per Deployment alone could cut: {allocation}")
        return 0
    require_traces(TRACES, "python -m benchmarks.fleet_simulate")
    gpn = args.gpus_per_node
    jobs: list[Job] = [*[(kind, float(q), False, args.days, h, gpn)
                         for kind, q in (("tuned", 0), *(("pinned", q) for q in POINTS)) for h in (False, True)],
                       *[("reactive", t, False, args.days, False, gpn) for t in TARGETS]]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(one_run, jobs))
    config = fleet(args.days, gpn)
    text = markdown(runs, config, time.perf_counter() - t0, args.days)
    print(text)
    if args.days == DAYS and gpn == GPUS_PER_NODE:
        update_section("fleet-simulate", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
