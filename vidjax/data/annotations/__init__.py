"""annotations package."""
