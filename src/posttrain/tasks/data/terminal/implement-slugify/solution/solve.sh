#!/bin/bash
# The oracle: run in /app.
set -euo pipefail
cat > slug.py <<'EOF'
"""URL slugs (see SPEC.md)."""
import re
import unicodedata


def slugify(text: str, max_length: int | None = None) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    if max_length is not None and len(slug) > max_length:
        cut = slug[:max_length]
        if slug[max_length] != "-" and "-" in cut:
            cut = cut[: cut.rindex("-")]
        slug = cut.strip("-")
    return slug or "n-a"
EOF
