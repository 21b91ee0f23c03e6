"""Retrieval at query time: the dense stage-1 index, generative recall over a semantic-ID trie, and the
two-stage (recall -> rerank) pipeline and the composed stack (recall -> any number of rescoring stages).

    from vidjax.retrieval import DenseIndex, GenerativeRecall, SemanticIdTrie, Stack, Stage, TwoStage
"""
from vidjax.retrieval.dense import DenseIndex
from vidjax.retrieval.generative import GenerativeRecall
from vidjax.retrieval.pipeline import TwoStage, TwoStageResult
from vidjax.retrieval.stack import Stack, Stage, StackResult
from vidjax.retrieval.trie import SemanticIdTrie, beam_search

__all__ = ["DenseIndex", "GenerativeRecall", "SemanticIdTrie", "Stack", "StackResult", "Stage", "TwoStage", "TwoStageResult", "beam_search"]
