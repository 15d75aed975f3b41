#!/bin/bash
# Harbor verifier entry point: reward 1 when every check of test_outputs.py passes, else 0
# (-S: the checks need only the standard library, and start faster without site-packages).
mkdir -p /logs/verifier
cd /app
if python3 -S /tests/test_outputs.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
