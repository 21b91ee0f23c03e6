"""VidCLIP as a method (../shared/papers/videocomp.txt §3-4): the dual encoder built from a config section (its
text tower from all-MiniLM-L6-v2, an LvT checkpoint or random), its examples as rows into frozen features,
training through the one loop with any of the `losses.COMP_MODES` objectives, and jitted encoders.

VideoComp (`configs/comp_*.py`) and GenState (`configs/genstate_rendered.py`) both train and evaluate VidCLIP
through this module. An example is a video given as rows into the frozen features (`video_rows [T]`,
`frame_rows [T]`: a span of one video, or k stacked clips of several) plus its texts; a features object has
`gather(video_rows [B, T], frame_rows [B, T]) -> float32 [B, T, N, D]` and, when they are in memory, `tokens`
[V, T, N, D] (training then gathers the frames on the device).
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from vidjax import checkpoints, evaluate, losses, train
from vidjax.data import pipeline
from vidjax.defaults import common
from vidjax.models import bert
from vidjax.models import vidclip as V
from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer
from vidjax.tokenizers.wordpiece import WordPieceTokenizer


def check_text_tower(config, section: str) -> None:
  """`<section>.init`: "minilm" needs all-MiniLM-L6-v2's shape; "lvt" an LvT checkpoint and its SentencePiece model."""
  common.check_choice(config, f"{section}.init", ("minilm", "lvt", "random"))
  mc = common.get_key(config, section)
  if mc.init == "minilm" and (mc.text_hidden, mc.text_layers, mc.text_heads, mc.text_mlp) != (384, 6, 12, 1536):
    common.bad_value(f"{section}.text_layers", mc.text_layers, "all-MiniLM-L6-v2's shape (384 wide, 6 layers, 12 "
                     f"heads, MLP 1536) with {section}.init='minilm', or {section}.init='random'")
  if mc.init == "lvt" and not (mc.lvt_checkpoint and mc.spm_path):
    common.bad_value(f"{section}.lvt_checkpoint", mc.lvt_checkpoint, f"an official VideoPrism LvT .npz, with its "
                     f"SentencePiece model in {section}.spm_path, when {section}.init='lvt'")


@dataclasses.dataclass
class Examples:
  """Training or evaluation examples as arrays (texts index `texts`)."""
  video_rows: np.ndarray   # int [E, T]
  frame_rows: np.ndarray   # int [E, T]
  positive: np.ndarray     # int [E] into texts
  negatives: np.ndarray    # int [E, H] into texts, -1 = none


class TextTable:
  """Unique texts -> rows (tokenized once)."""

  def __init__(self):
    self.rows: dict[str, int] = {}

  def __call__(self, text: str | None) -> int:
    if text is None:
      return -1
    return self.rows.setdefault(text, len(self.rows))

  def tokens(self, tokenizer, max_len: int) -> dict[str, np.ndarray]:
    return pipeline.text_token_batch(tokenizer, list(self.rows), max_len)


def model_config(mc, visual_dim: int, vocab_size: int = 32_000, tokens_per_frame: int = 1) -> V.VidClipConfig:
  """The VidCLIP of a model section; `vocab_size`: the SentencePiece vocabulary of an LvT text tower;
  `tokens_per_frame`: N of the frozen inputs (the video blocks' size, `video_block`)."""
  lvt = None if mc.init != "lvt" else V.LvtText(vocabulary_size=vocab_size, model_dim=mc.text_hidden,
                                                 num_layers=mc.text_layers, num_heads=mc.text_heads, mlp_dim=mc.text_mlp)
  text = bert.BertConfig(vocab_size=30522, hidden_size=mc.text_hidden, num_layers=mc.text_layers,
                         num_heads=mc.text_heads, intermediate_size=mc.text_mlp,
                         max_position=512 if mc.init == "minilm" else mc.max_text_len,
                         dropout_rate=mc.dropout_rate, attention_dropout_rate=mc.dropout_rate, use_pooler=False)
  cfg = V.VidClipConfig(visual_dim=visual_dim, frames=mc.frames, width=mc.width, pool_queries=mc.pool_queries,
                        pool_heads=mc.pool_heads, pool_mlp=mc.pool_mlp, embed_dim=mc.embed_dim, text=text, lvt=lvt,
                        max_text_len=mc.max_text_len, init_temperature=mc.init_temperature, dtype=mc.dtype,
                        pool_init=mc.get("pool_init", "random"),  # GenState's model section has none: random
                        text_block=text_block(mc, text))
  return dataclasses.replace(cfg, video_block=video_block(mc, cfg, tokens_per_frame))


def text_block(mc, text: bert.BertConfig) -> int:
  """Texts per rematerialized training block whose text-tower activations fit `mc.memory_gb` GB
  (`bert.activation_bytes` at `max_text_len`, the LvT tower's shape for an LvT tower); 0 (one pass) when the
  section sets no budget (GenState's)."""
  budget = _budget(mc)
  if budget <= 0:
    return 0
  if mc.init == "lvt":
    text = bert.BertConfig(hidden_size=mc.text_hidden, num_layers=mc.text_layers, num_heads=mc.text_heads,
                           intermediate_size=mc.text_mlp)
  return max(1, int(budget // bert.activation_bytes(text, mc.max_text_len)))


def video_block(mc, cfg: V.VidClipConfig, tokens_per_frame: int) -> int:
  """Videos per rematerialized training block whose video-tower activations fit `mc.memory_gb` GB
  (`V.video_activation_bytes`); 0 (one pass) when the section sets no budget. The text and video passes of a step
  are rematerialized one block at a time, each within the budget."""
  budget = _budget(mc)
  return 0 if budget <= 0 else max(1, int(budget // V.video_activation_bytes(cfg, tokens_per_frame)))


def _budget(mc) -> float:
  """A model section's `memory_gb` in bytes (0: none; GenState's section has none)."""
  return float(mc.get("memory_gb", 0.0)) * 1e9


def text_tokenizer(mc):
  """The tokenizer of a model section's text tower (the `text_token_batch` contract): SentencePiece for an LvT
  tower (`init="lvt"`), all-MiniLM-L6-v2's WordPiece otherwise."""
  if mc.init == "lvt":
    sp = SentencePieceTokenizer(mc.spm_path)

    def tokenizer(texts, max_length, padding="max_length"):  # the `text_token_batch` contract: ids and a mask
      del padding  # always fixed length
      ids, paddings = sp.encode(list(texts), max_length)
      return ids, (1.0 - paddings).astype(np.int32)

    tokenizer.vocab_size = sp.vocab_size
    return tokenizer
  return WordPieceTokenizer.from_vocab(Path(mc.minilm_dir or checkpoints.default_minilm_dir()) / "vocab.txt")


def vidclip_setup(mc, visual_dim: int, tokens_per_frame: int, tokenizer=None):
  """(VidCLIP, tokenizer, fresh-params function) of a model section: the text tower from all-MiniLM-L6-v2
  (WordPiece), from an LvT checkpoint (SentencePiece) or random (WordPiece ids); `tokenizer`: the section's
  (`text_tokenizer`), when the caller has it already."""
  tokenizer = tokenizer if tokenizer is not None else text_tokenizer(mc)
  if mc.init == "lvt":
    model = V.VidClip(model_config(mc, visual_dim, tokenizer.vocab_size, tokens_per_frame))
    # Read and checked once, here: the text encoder's arrays only (not the checkpoint's vision tower).
    shapes = jax.eval_shape(lambda: V.init_params(model, jax.random.PRNGKey(0), tokens_per_frame))
    text_encoder = checkpoints.lvt_text_encoder(mc.lvt_checkpoint, shapes["text"]["lvt"])
    return model, tokenizer, lambda rng: V.init_text_from_lvt(V.init_params(model, rng, tokens_per_frame), text_encoder)
  model = V.VidClip(model_config(mc, visual_dim, tokens_per_frame=tokens_per_frame))
  text_init = checkpoints.load_bert_dir(mc.minilm_dir) if mc.init == "minilm" else None

  def fresh(rng):
    params = V.init_params(model, rng, tokens_per_frame)
    return V.init_text_from(params, text_init) if text_init is not None else params

  return model, tokenizer, fresh


def batch_fn_for(data, ex: Examples, tokens: dict[str, np.ndarray]) -> tuple:
  """(batch_fn, gather) of VidCLIP training: the texts' token ids (and, when the features are in memory,
  `data.tokens` [V, T, N, D], the video frames) travel as rows and are gathered on the device (`pipeline.Gather`);
  features that stream from the store are read on the host by `data.gather`."""
  frames = getattr(data, "tokens", None)
  tables = {"text_ids": tokens["input_ids"], "text_mask": tokens["attention_mask"]}
  fields = {"input_ids": "text_ids", "attention_mask": "text_mask", "neg_ids": "text_ids", "neg_mask": "text_mask"}
  if frames is not None:
    per_video = frames.shape[1]
    tables["frames"] = frames.reshape(-1, *frames.shape[2:])  # [V * T, N, D]: row v * T + t
    fields["video"] = "frames"

  def batch_fn(idx):
    neg = ex.negatives[idx]
    safe = np.maximum(neg, 0).astype(np.int32)
    positive = ex.positive[idx].astype(np.int32)
    video = (ex.video_rows[idx] * per_video + ex.frame_rows[idx]).astype(np.int32) if frames is not None \
        else data.gather(ex.video_rows[idx], ex.frame_rows[idx])
    return {"video": video, "input_ids": positive, "attention_mask": positive, "neg_ids": safe, "neg_mask": safe,
            "neg_valid": (neg >= 0).astype(np.float32)}
  return batch_fn, pipeline.Gather(tables, fields)


def trimmed_tokens(cfg: V.VidClipConfig, tokens: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
  """`tokens` cut to the longest of the texts a training reads (`rows`; -1 = none): exact for a BERT text tower (its
  padding is masked and its positions count from the start, so every embedding is the same; a shorter step is fewer
  FLOPs and less memory, e.g. pretraining's single sentences against fine-tuning's paragraphs). An LvT tower reads its
  CLS after the padding, at a position that depends on the length: its tokens stay as they are."""
  rows = rows[rows >= 0]
  if cfg.lvt is not None or not len(rows):
    return tokens
  longest = max(1, int(tokens["attention_mask"][rows].sum(1).max()))
  return {k: v[:, :longest] for k, v in tokens.items()}


def optimizer(tc, video_lr: float | None = None) -> optax.GradientTransformation:
  """AdamW of a train section (`tc.lr`, `tc.weight_decay`, `tc.warmup_steps`); with `video_lr` the video tower's
  parameters (`video/...`) get that learning rate instead (`optax.multi_transform`), the rest `tc.lr`."""
  adamw = lambda lr: train.adamw(lr, tc.weight_decay, tc.warmup_steps)  # noqa: E731
  if video_lr is None:
    return adamw(tc.lr)
  return optax.multi_transform({"video": adamw(video_lr), "rest": adamw(tc.lr)},
                               lambda p: train.param_labels(p, [(r"video/.*", "video"), (r".*", "rest")]))


def train_model(name: str, model: V.VidClip, init_fn, ex: Examples, data, tokens, tc, mode: str,
                seed: int, workdir: Path, group: int = 1, video_lr: float | None = None):
  """One VidCLIP training through the one loop; returns host params.

  `group` > 1 keeps runs of `group` consecutive examples in one batch (e.g. a GenState query's clip and its
  two hard-negative clips, so each is an in-batch negative of the others); `tc.batch_size` must divide by it.
  `video_lr`: the video tower's own learning rate (`optimizer`); None = `tc.lr` for every parameter.
  """

  def loss_fn(params, batch, rng):
    apply = functools.partial(model.apply, {"params": params})
    video = apply(batch["video"], False, method=V.VidClip.encode_video)
    tau = apply(method=V.VidClip.temperature)
    b, h, s = batch["neg_ids"].shape
    # The positives and the negatives in one text-tower pass: one pass's blocks (`VidClipConfig.text_block`) bound
    # the activations a step keeps, where two passes would keep the first's beside the second's blocks.
    ids = jnp.concatenate([batch["input_ids"], batch["neg_ids"].reshape(b * h, s)])
    mask = jnp.concatenate([batch["attention_mask"], batch["neg_mask"].reshape(b * h, s)])
    texts = apply(ids, mask, False, method=V.VidClip.encode_text, rngs={"dropout": rng})
    text, neg = texts[:b], texts[b:].reshape(b, h, texts.shape[-1])
    if h == 0:
      loss, aux = losses.comp_total_loss(video, text, neg, jnp.zeros((b, 0)), tau, mode="contrastive")
    else:
      # the mode travels in the batch: every mode with negatives shares one compiled step
      loss, aux = losses.comp_total_loss(video, text, neg, batch["neg_valid"], tau, weights=batch["loss_weights"][0],
                                         levels=tuple(tc.levels))
    return loss, {**aux, "tau": tau}

  negs = ex.negatives if mode != "contrastive" else ex.negatives[:, :0]
  ex = dataclasses.replace(ex, negatives=negs)
  tokens = trimmed_tokens(model.config, tokens, np.concatenate([ex.positive, negs.reshape(-1)]))
  weights = losses.comp_mode_weights(mode, tc.lam)
  batch_fn, gather = batch_fn_for(data, ex, tokens)
  batch_fn = gather.host(batch_fn)
  if mode != "contrastive":
    batch_fn = lambda idx, fn=batch_fn: {**fn(idx), "loss_weights": np.tile(weights, (len(idx), 1))}  # noqa: E731
  if group > 1:
    if tc.batch_size % group or len(ex.positive) % group:
      raise ValueError(f"VidCLIP {name}: batch size {tc.batch_size} and {len(ex.positive)} examples must be "
                       f"multiples of the group size {group}")
    grouped = lambda idx, fn=batch_fn: fn((np.asarray(idx)[:, None] * group + np.arange(group)).reshape(-1))  # noqa: E731
    dataset = pipeline.loader(pipeline.make_index_batches(len(ex.positive) // group, tc.batch_size // group, seed,
                                                          grouped))
  else:
    dataset = pipeline.loader(pipeline.make_index_batches(len(ex.positive), tc.batch_size, seed, batch_fn))
  state, _ = train.fit(init_fn=init_fn, loss_fn=loss_fn,
                       optimizer=optimizer(tc, video_lr),
                       dataset=dataset, num_steps=tc.steps, workdir=workdir / "models" / name, seed=seed,
                       checkpoint_every=tc.checkpoint_every, log_every=min(tc.log_every, tc.steps),
                       progress=tc.progress, description=f"VidCLIP {name}", gather=gather)
  return jax.device_get(state.params)


class Encoder:
  """Jitted unit embeddings of videos (given as feature rows) and texts, in fixed-size chunks: `chunk` texts, and
  `chunk` videos but at most the model's training `video_block` (the videos whose video-tower activations fit the
  section's `memory_gb`), so evaluation stays within the budget training does. At the paper's shapes on
  VideoPrism-B's 16 x 256 tokens a video, 256 videos in one pass keep 13.1 GB of XLA temporaries, the 11 of a 4 GB
  block 0.56 GB (`memory_analysis`, CPU; BENCHMARKS.md, "Small corpora")."""

  def __init__(self, model: V.VidClip, data, chunk: int):
    block = model.config.video_block
    self.data, self.chunk, self.video_chunk = data, chunk, min(chunk, block) if block else chunk
    self._video = jax.jit(lambda p, x: model.apply({"params": p}, x, method=V.VidClip.encode_video))
    self._text = jax.jit(lambda p, i, m: model.apply({"params": p}, i, m, method=V.VidClip.encode_text))

  def videos(self, params, video_rows, frame_rows) -> np.ndarray:
    return evaluate.chunked(lambda b: self._video(params, self.data.gather(b["v"], b["f"])),
                            {"v": video_rows, "f": frame_rows}, self.video_chunk)

  def texts(self, params, tokens) -> np.ndarray:
    return evaluate.chunked(lambda b: self._text(params, b["input_ids"], b["attention_mask"]), tokens, self.chunk)

  def strings(self, params, texts: Sequence[str], tokenizer, max_len: int) -> np.ndarray:
    """Embeddings of raw texts (each distinct text encoded once)."""
    table = TextTable()
    rows = [table(t) for t in texts]
    return self.texts(params, table.tokens(tokenizer, max_len))[rows]
