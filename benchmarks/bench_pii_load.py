"""The prepare stage's personal-data recognizers loaded in a fresh interpreter (grpoflow/data/pii.py:
every type, Presidio's four pattern recognizers, its e-mail one with tldextract and detect-secrets'
key formats, the module and its config imports timed too), against the reference of importing
Presidio's four plainly, which imports its NLP engines' torch and transformers where they are
installed. Median of a few fresh processes each."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Each prints the seconds its load took and whether torch came with it.
PLAIN = """
import sys, time
start = time.perf_counter()
from presidio_analyzer.predefined_recognizers import CreditCardRecognizer, IbanRecognizer, IpRecognizer, PhoneRecognizer
print(time.perf_counter() - start, "torch" in sys.modules)
"""
OURS = """
import sys, time
start = time.perf_counter()
from grpoflow.config import PiiConfig
from grpoflow.data import pii
pii.finders(tuple(PiiConfig().entities))
print(time.perf_counter() - start, "torch" in sys.modules)
"""


def _load(code: str, repeats: int) -> tuple[float, bool]:
    seconds, torch = [], set()
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
        took, loaded = out.stdout.split()
        seconds.append(float(took))
        torch.add(loaded == "True")
    return statistics.median(seconds), torch == {True}


def run(repeats: int = 3) -> dict:
    plain, plain_torch = _load(PLAIN, repeats)
    ours, ours_torch = _load(OURS, repeats)
    return {
        "presidio_plain_import_seconds": round(plain, 2),
        "pii_finders_seconds": round(ours, 2),
        "finders_over_plain": round(ours / plain, 3),
        "torch_imported": {"plain": plain_torch, "finders": ours_torch},
        "repeats": repeats,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
