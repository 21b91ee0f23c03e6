"""Retrieval at query time: the dense stage-1 index and the two-stage (recall -> rerank) pipeline.

    from vidjax.retrieval import DenseIndex, TwoStage
"""
from vidjax.retrieval.dense import DenseIndex
from vidjax.retrieval.pipeline import TwoStage, TwoStageResult

__all__ = ["DenseIndex", "TwoStage", "TwoStageResult"]
