#!/bin/bash
# Harbor verifier entry point: test_outputs.py writes /logs/verifier/reward.json (the fraction of checks passed).
mkdir -p /logs/verifier
cd /app
python3 /tests/test_outputs.py
