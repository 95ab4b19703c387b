"""Images in, tokens out: image checks, lazy pipelines, AWQ loading, caches, generation."""
