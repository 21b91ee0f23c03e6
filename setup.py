"""vidjax: state-aware, temporally consistent video-text retrieval in JAX/Flax."""
from setuptools import find_packages, setup

setup(
    name="vidjax",
    version="0.1.0",
    description="JAX/Flax research codebase for state-aware, temporally consistent video-text retrieval "
                "(CAST, VEDJE, VideoComp, GenState-AI, GRDR) on natively extracted VideoPrism features.",
    packages=find_packages(include=["vidjax", "vidjax.*"]),
    package_data={"vidjax.data": ["resources/*.json"]},  # the VideoComp action lexicon
    python_requires=">=3.10",
    install_requires=[
        "jax>=0.4.35",
        "flax>=0.10",
        "optax>=0.2.3",
        "orbax-checkpoint>=0.9",
        "grain>=0.2.2",
        "ml-collections>=0.1.1",
        "numpy>=1.26",
        "absl-py>=2.0",
        "etils[epath]>=1.7",
        "safetensors>=0.4",      # MiniLM weights (read with numpy, no PyTorch)
        "sentencepiece>=0.2",    # VideoPrism text tokenizer
        "tokenizers>=0.15",      # BERT WordPiece for MiniLM (Hugging Face's Rust tokenizer, no PyTorch)
        "av>=12.0",              # PyAV video decoding
        "matplotlib>=3.8",       # Figure-6-style plots
        "tensorboardX>=2.6",     # TensorBoard event files without TensorFlow
        "tqdm>=4.66",
    ],
    extras_require={
        # The test suite builds and reads the TFDS datasets, so it installs the tfds extra too.
        # faiss-cpu and scann too, so the library backends' tests run rather than skip.
        "test": ["pytest>=8.0", "pytest-xdist>=3.5", "filelock>=3.12", "tensorflow-datasets>=4.9", "importlib_resources>=5",
                 "faiss-cpu>=1.7", "scann>=1.4"],
        # vidjax.tfds builders (array_record, no TensorFlow); tfds 4.9 needs importlib_resources declared.
        "tfds": ["tensorflow-datasets>=4.9", "importlib_resources>=5"],
        "faiss": ["faiss-cpu>=1.7"],  # DenseIndex(backend="faiss"); bench/dense_index.py's faiss column
        "scann": ["scann>=1.4"],      # DenseIndex(backend="scann") (its numpy API: no TensorFlow)
    },
)
