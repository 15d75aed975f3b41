#!/bin/bash
# Harbor verifier entry point: test_outputs.py writes /logs/verifier/reward.json (the fraction of checks passed;
# -S: it needs only the standard library, and starts faster without site-packages).
mkdir -p /logs/verifier
cd /app
python3 -S /tests/test_outputs.py
