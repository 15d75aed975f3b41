"""URL slugs (see SPEC.md)."""


def slugify(text: str, max_length: int | None = None) -> str:
    raise NotImplementedError
