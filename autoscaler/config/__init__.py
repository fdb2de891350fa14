"""The operator's configuration, in three pieces: ``schema`` (the frozen values and their defaults), ``parser`` (YAML
text to those values, every mistake with its key path) and ``store`` (the file re-read while the controller runs,
swapped in only when valid)."""
