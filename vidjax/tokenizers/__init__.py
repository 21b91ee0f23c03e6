"""Text tokenizers: SentencePiece (VideoPrism LvT text tower) and WordPiece (BERT / MiniLM)."""
from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer
from vidjax.tokenizers.wordpiece import WordPieceTokenizer

__all__ = ["SentencePieceTokenizer", "WordPieceTokenizer"]
