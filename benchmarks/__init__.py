"""Speed and memory measurements, each a ratio against a reference measured in the same run."""
