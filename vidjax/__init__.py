"""vidjax: state-aware, temporally consistent video-text retrieval in JAX/Flax.

See README.md for the package layout and ../shared/ARCHITECTURE.md for the product definition.
"""

__version__ = "0.1.0"
