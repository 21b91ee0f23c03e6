"""TFDS dataset builders for vidjax's benchmarks and extracted features (no TensorFlow).

`vidjax.tfds.cvr.VidjaxCvr` (CAST's CVR benchmarks), `vidjax.tfds.retrieval.VidjaxRetrieval` (MSR-VTT
1k-A, DiDeMo and ActivityNet paragraphs) and `vidjax.tfds.genstate.VidjaxGenstate` (GenState triplet
metadata); `vidjax.tfds.common` builds (`prepare`) and reads (`open_dataset`, `read_split`) them.
Needs the `tfds` extra: `pip install -e ".[tfds]"`.
"""
