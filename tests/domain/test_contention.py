"""Which HorizontalPodAutoscalers also scale a Deployment (``autoscaler.domain.contention``)."""

from __future__ import annotations

from autoscaler.domain.contention import OVERWRITE_WINDOW_SECONDS, contended_message, recent_overwrites, scalers_of
from autoscaler.ports import ScalerView


def test_only_hpas_of_that_deployment_in_its_namespace_count() -> None:
    scalers = [
        ScalerView("ml", "llama-cpu", "apps/v1", "Deployment", "llama"),
        ScalerView("ml", "keda-hpa-llama", "apps/v1", "Deployment", "llama"),
        ScalerView("ml", "old", "extensions/v1beta1", "Deployment", "llama"),  # an old manifest's group
        ScalerView("web", "llama-cpu", "apps/v1", "Deployment", "llama"),  # another namespace
        ScalerView("ml", "db", "apps/v1", "StatefulSet", "llama"),  # another kind of the same name
        ScalerView("ml", "custom", "example.com/v1", "Deployment", "llama"),  # a custom resource named Deployment
        ScalerView("ml", "mistral-cpu", "apps/v1", "Deployment", "mistral"),
    ]
    assert scalers_of("ml", "llama", scalers) == ("keda-hpa-llama", "llama-cpu", "old")
    assert scalers_of("ml", "mistral", scalers) == ("mistral-cpu",)
    assert scalers_of("ml", "qwen", scalers) == ()


def test_the_warning_names_the_hpas_and_what_to_do() -> None:
    text = contended_message(("keda-hpa-llama", "llama-cpu"))
    assert text.startswith("HorizontalPodAutoscaler keda-hpa-llama, llama-cpu also scales this Deployment")
    assert "advisory" in text
    assert "Delete the HPA" in text
    assert len(text) < 1000  # an Event's message fits without being cut


def test_an_overwrite_counts_for_an_hour() -> None:
    now = 10_000.0
    times = (now - OVERWRITE_WINDOW_SECONDS - 1, now - OVERWRITE_WINDOW_SECONDS, now - 60, now)
    assert recent_overwrites(times, now) == (now - 60, now)
