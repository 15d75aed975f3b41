#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cd photos
for f in IMG_*; do
  if [[ $f =~ ^IMG_([0-9]{4})([0-9]{2})([0-9]{2})_([0-9]{6})\.([jJ][pP][eE]?[gG])$ ]]; then
    mv -- "$f" "${BASH_REMATCH[1]}-${BASH_REMATCH[2]}-${BASH_REMATCH[3]}_${BASH_REMATCH[4]}.jpg"
  fi
done
