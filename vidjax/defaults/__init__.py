"""Light default-config modules (ml_collections only, no jax): one per experiment kind."""
