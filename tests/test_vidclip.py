"""VidCLIP (VideoComp §4.1): shapes, MiniLM text init, and that it learns event order on tiny data."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vidjax import checkpoints, losses
from vidjax.models import bert
from vidjax.models import vidclip as V
from vidjax.ops import flatten_dict, unflatten_dict

TEXT = bert.BertConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position=16,
                       dropout_rate=0.0, attention_dropout_rate=0.0, use_pooler=False)


def tiny(**kw):
  base = dict(visual_dim=8, frames=4, width=32, pool_queries=4, pool_heads=2, pool_mlp=64, embed_dim=16,
              text=TEXT, max_text_len=8)
  base.update(kw)
  return V.VidClipConfig(**base)


@pytest.fixture(scope="module")
def model_and_params():
  model = V.VidClip(tiny())
  return model, jax.jit(lambda key: V.init_params(model, key, tokens_per_frame=3))(jax.random.PRNGKey(0))


def test_shapes_units_and_temperature(model_and_params):
  model, params = model_and_params
  apply = jax.jit(model.apply, static_argnames="method")  # one program a shape, not one per op
  ids = jnp.ones((5, 8), jnp.int32)
  v, t, tau = apply({"params": params}, jnp.ones((3, 4, 3, 8)), ids, jnp.ones_like(ids))
  assert v.shape == (3, 16) and t.shape == (5, 16)
  np.testing.assert_allclose(np.linalg.norm(v, axis=-1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(t, axis=-1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(tau, 0.07, rtol=1e-5)
  # Per-frame embeddings [B, T, D] are N = 1 tokens per frame, through the same parameters.
  per_frame = apply({"params": params}, jnp.ones((2, 4, 8)), method=V.VidClip.encode_video)
  assert per_frame.shape == (2, 16)
  # The temporal encoding makes the embedding depend on frame order.
  x = jax.random.normal(jax.random.PRNGKey(1), (1, 4, 3, 8))
  a = apply({"params": params}, x, method=V.VidClip.encode_video)
  b = apply({"params": params}, x[:, ::-1], method=V.VidClip.encode_video)
  assert float(jnp.abs(a - b).max()) > 1e-4


def test_bad_inputs_and_config(model_and_params):
  model, params = model_and_params
  with pytest.raises(ValueError, match=r"\[B, T=4, N, D=8\]"):
    model.apply({"params": params}, jnp.ones((2, 5, 3, 8)), method=V.VidClip.encode_video)
  with pytest.raises(ValueError, match="max_text_len=8"):
    model.apply({"params": params}, jnp.ones((1, 9), jnp.int32), jnp.ones((1, 9), jnp.int32),
                method=V.VidClip.encode_text)
  with pytest.raises(ValueError, match="pool_heads"):
    tiny(width=30, pool_heads=4)
  with pytest.raises(ValueError, match="max_position"):
    tiny(max_text_len=32)
  with pytest.raises(ValueError, match="pool_queries"):
    tiny(pool_queries=0)


@pytest.mark.minilm
def test_text_tower_starts_from_the_real_minilm():
  folder = checkpoints.default_minilm_dir()
  pretrained = checkpoints.load_bert_safetensors(folder / "model.safetensors",
                                                 checkpoints.bert_config_from_json(folder / "config.json"))
  cfg = tiny(text=bert.BertConfig(use_pooler=False), max_text_len=160)  # all-MiniLM-L6-v2's shape, 160 tokens
  model = V.VidClip(cfg)
  params = jax.eval_shape(lambda: V.init_params(model, jax.random.PRNGKey(0)))
  params = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), params)
  new = V.init_text_from(params, pretrained)
  got = new["text"]["bert"]["layer_5"]["attention"]["query"]["kernel"]
  np.testing.assert_array_equal(got, pretrained["layer_5"]["attention"]["query"]["kernel"])
  np.testing.assert_array_equal(new["text"]["bert"]["embeddings"]["position_embeddings"]["embedding"],
                                pretrained["embeddings"]["position_embeddings"]["embedding"])
  assert float(jnp.abs(new["text"]["out_proj"]["kernel"]).max()) == 0.0  # the projection is not BERT's
  with pytest.raises(ValueError, match="VidCLIP text tower has 1 layers, the pretrained BERT 6"):
    V.init_text_from(jax.eval_shape(lambda: V.init_params(V.VidClip(tiny()), jax.random.PRNGKey(0))), pretrained)


@pytest.mark.highest_precision  # compared with another computation at 1e-5
def test_text_tower_starts_from_an_lvt_checkpoint_and_computes_the_lvt_text_embedding():
  from vidjax.models import videoprism
  lvt = videoprism.FactorizedVideoCLIP(patch_size=2, pos_emb_shape=(2, 2, 2), num_spatial_layers=1, num_temporal_layers=1,
                                       mlp_dim=16, num_auxiliary_layers=1, vocabulary_size=50, num_unimodal_layers=2,
                                       model_dim=16, num_heads=2)
  official = flatten_dict(jax.device_get(videoprism.init_params(lvt, seed=3)))  # "params/text_encoder/..."
  cfg = tiny(lvt=V.LvtText(vocabulary_size=50, model_dim=16, num_layers=2, num_heads=2, mlp_dim=64), embed_dim=16,
             max_text_len=12)
  model = V.VidClip(cfg)
  params = V.init_params(model, jax.random.PRNGKey(0), 3)
  params = V.init_text_from_lvt(params, checkpoints.lvt_text_encoder(official, params["text"]["lvt"], "tiny.npz"))
  params["text"]["out_proj"] = {"kernel": jnp.eye(16), "bias": jnp.zeros(16)}  # read the CLS state itself
  ids = jax.random.randint(jax.random.PRNGKey(1), (3, 12), 3, 50)
  mask = (jnp.arange(12)[None] < jnp.array([[12], [5], [1]])).astype(jnp.int32)
  ids = ids * mask
  got = jax.jit(lambda p, i, m: model.apply({"params": p}, i, m, method=V.VidClip.encode_text))(params, ids, mask)
  _, want, _ = jax.jit(lambda p, i, pad: lvt.apply({"params": p}, None, i, pad))(
      unflatten_dict(official)["params"], ids, (1 - mask).astype(jnp.float32))
  np.testing.assert_allclose(got, want, atol=1e-5)
  bad = {k: v for k, v in official.items() if "unimodal_ln" not in k}
  with pytest.raises(checkpoints.CheckpointMismatchError, match="tiny.npz.*\n.*missing.*unimodal_ln"):
    checkpoints.lvt_text_encoder(bad, params["text"]["lvt"], "tiny.npz")
  with pytest.raises(ValueError, match="not an LvT encoder"):
    V.init_text_from_lvt(V.init_params(V.VidClip(tiny()), jax.random.PRNGKey(0)), params["text"]["lvt"])
  with pytest.raises(ValueError, match="does not match the text tower"):
    V.init_text_from_lvt(params, {"cls_emb": params["text"]["lvt"]["cls_emb"]})


def test_learns_the_order_of_events_with_its_negatives():
  """The thing VideoComp trains it for: two events shown in order, the paragraph vs its reordering."""
  rng = np.random.default_rng(0)
  words = np.arange(2000, 2006)          # 6 event words
  codes = rng.normal(size=(6, 8)).astype(np.float32)
  pairs = [(a, b) for a in range(6) for b in range(6) if a != b]

  def video(a, b):
    x = np.concatenate([np.repeat(codes[a][None], 2, 0), np.repeat(codes[b][None], 2, 0)])
    return x + 0.05 * rng.normal(size=x.shape).astype(np.float32)

  def text(a, b):
    return np.array([101, words[a], words[b], 102, 0, 0, 0, 0], np.int32)

  x = np.stack([video(a, b) for a, b in pairs])
  pos = np.stack([text(a, b) for a, b in pairs])
  neg = np.stack([text(b, a) for a, b in pairs])[:, None]
  mask = (pos > 0).astype(np.int32)
  model = V.VidClip(tiny(text=TEXT, max_text_len=8))
  params = jax.jit(lambda key: V.init_params(model, key))(jax.random.PRNGKey(0))
  opt = optax.adam(3e-3)

  @jax.jit
  def accuracy(p):
    v = model.apply({"params": p}, x, method=V.VidClip.encode_video)
    tp = model.apply({"params": p}, pos, mask, method=V.VidClip.encode_text)
    tn = model.apply({"params": p}, neg[:, 0], mask, method=V.VidClip.encode_text)
    return jnp.mean(jnp.sum(v * tp, -1) > jnp.sum(v * tn, -1))

  @jax.jit
  def step(p, s):
    def loss(p):
      v, t, tau = model.apply({"params": p}, x, pos, mask)
      n = model.apply({"params": p}, neg[:, 0], mask, method=V.VidClip.encode_text)[:, None]
      return losses.comp_total_loss(v, t, n, jnp.ones((len(x), 1)), tau, mode="comploss", lam=10.0)[0]
    g = jax.grad(loss)(p)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s

  before = float(accuracy(params))
  state = opt.init(params)
  for _ in range(150):
    params, state = step(params, state)
  after = float(accuracy(params))
  assert after >= 0.9, (before, after)
  assert after - before >= 0.3, (before, after)


def _layer_norm(x):
  x = np.asarray(x, np.float64)
  return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)  # flax's epsilon


@pytest.mark.highest_precision  # compared with another computation at 1e-5
def test_a_mean_initialised_pooler_is_mean_pooling_and_its_query_projection_learns():
  model = V.VidClip(tiny(pool_init="mean"))
  params = V.init_params(model, jax.random.PRNGKey(3), tokens_per_frame=3)
  x = np.asarray(jax.random.normal(jax.random.PRNGKey(4), (2, 12, 32)))  # [B, T·N, width]
  for name, queries in (("pool_1", 4), ("pool_2", 1)):
    pool = V.AttentionPool(queries, 2, 64)
    got = pool.apply({"params": params["video"][name]}, x)
    want = np.broadcast_to(_layer_norm(x).mean(1, keepdims=True), got.shape)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # A random pooler is not mean pooling (so the check above can fail).
    random = V.init_params(V.VidClip(tiny()), jax.random.PRNGKey(3), tokens_per_frame=3)["video"][name]
    assert np.abs(pool.apply({"params": random}, x) - want).max() > 1e-2
  # The query projection starts at zero and still gets a gradient (the key projection is random).
  video = jax.random.normal(jax.random.PRNGKey(5), (3, 4, 3, 8))
  ids = jnp.ones((3, 8), jnp.int32)

  def loss(p):
    v, t, tau = model.apply({"params": p}, video, ids.at[:, 1].set(jnp.arange(3) + 5), jnp.ones_like(ids))
    return losses.clip_contrastive_loss(v, t, tau)

  grads = jax.jit(jax.grad(loss))(params)
  assert float(jnp.abs(params["video"]["pool_1"]["attention"]["query"]["kernel"]).max()) == 0.0
  assert float(jnp.abs(grads["video"]["pool_1"]["attention"]["query"]["kernel"]).max()) > 0.0
  with pytest.raises(ValueError, match="pool_init='bogus'"):
    tiny(pool_init="bogus")


def test_the_video_lr_option_moves_the_video_tower_and_keeps_the_text_tower():
  """configs/comp_activitynet.py pretrains every parameter at §4.1's lr 1e-7; the `pretrain.video_lr` option gives
  the (new) video tower its own rate."""
  from pathlib import Path
  from vidjax.defaults.common import with_values
  from vidjax.experiments.common import load_config
  from vidjax.methods import vidclip as M
  config = load_config(Path(__file__).resolve().parents[1] / "configs/comp_activitynet.py")
  assert config.model.pool_init == "mean" and config.pretrain.video_lr == config.pretrain.lr == 1e-7
  tc, steps = with_values(config.pretrain, {"video_lr": 1e-4}), 5  # the option (CLIP4Clip's rate for new modules)
  model = V.VidClip(tiny(pool_init=config.model.pool_init))
  params = V.init_params(model, jax.random.PRNGKey(0), tokens_per_frame=3)
  video = jax.random.normal(jax.random.PRNGKey(1), (4, 4, 3, 8))
  ids = jax.random.randint(jax.random.PRNGKey(2), (4, 8), 1, 100)

  def loss(p):
    v, t, tau = model.apply({"params": p}, video, ids, jnp.ones_like(ids))
    return losses.clip_contrastive_loss(v, t, tau)

  grad = jax.jit(jax.grad(loss))

  def train(opt):
    state, p = opt.init(params), params
    for _ in range(steps):
      updates, state = opt.update(grad(p), state, p)
      p = optax.apply_updates(p, updates)
    return jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), p, params)

  moved = train(M.optimizer(tc, tc.video_lr))
  # Adam moves a weight with a steady gradient by about lr per step (float32 rounds a change of 5e-7 to a weight
  # near 1 to within 1.2e-7).
  assert 0.5 * steps * tc.video_lr < moved["video"]["pool_1"]["attention"]["query"]["kernel"] <= 1.01 * steps * tc.video_lr
  assert 0.5 * steps * tc.video_lr < moved["video"]["pool_2"]["mlp_out"]["kernel"] <= 1.01 * steps * tc.video_lr
  assert max(jax.tree.leaves(moved["text"])) <= 2 * steps * tc.lr
  # One rate for everything (no video_lr) leaves the pooler where lr 1e-7 leaves it.
  assert train(M.optimizer(tc))["video"]["pool_1"]["attention"]["query"]["kernel"] <= 2 * steps * tc.lr


def _assert_same_embeddings_and_grads(loss, params, first, second, *, grad_atol: float, grad_rtol: float):
  """`loss(params, x) -> (scalar, embeddings)` at `first` and at `second`: the same embeddings (float32 on any
  backend: 1e-5) and gradients (at the caller's tolerance)."""
  (_, e1), g1 = jax.value_and_grad(loss, has_aux=True)(params, first)
  (_, e2), g2 = jax.value_and_grad(loss, has_aux=True)(params, second)
  np.testing.assert_allclose(e2, e1, atol=1e-5)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(b, a, atol=grad_atol, rtol=grad_rtol)


def test_text_blocks_give_one_pass_gradients_and_balance_their_sizes():
  """`text_block`: a training step's texts in rematerialized blocks (`layers.scan_blocks`) give the one-pass
  embeddings and gradients (no dropout; float32 rounding); 9 rows at most 8 a block run as 2 blocks of 5."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from vidjax.models import layers  # pylint: disable=g-import-not-at-top
  cfg = V.VidClipConfig(visual_dim=8, frames=4, width=16, pool_queries=4, pool_heads=2, pool_mlp=16, embed_dim=8,
                        text=bert.BertConfig(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2,
                                             intermediate_size=32, max_position=12, dropout_rate=0.0,
                                             attention_dropout_rate=0.0), max_text_len=12)
  one, blocked = V.VidClip(cfg), V.VidClip(dataclasses.replace(cfg, text_block=3))
  params = V.init_params(one, jax.random.PRNGKey(0))
  ids = jax.random.randint(jax.random.PRNGKey(1), (7, 12), 0, 50)
  mask = (jnp.arange(12)[None] < jnp.array([12, 3, 5, 12, 7, 2, 9])[:, None]).astype(jnp.int32)

  def loss(p, model):
    emb = model.apply({"params": p}, ids, mask, False, method="encode_text", rngs={"dropout": jax.random.PRNGKey(2)})
    return jnp.sum(emb[:, :3] ** 3), emb

  _assert_same_embeddings_and_grads(loss, params, one, blocked, grad_atol=1e-4, grad_rtol=1e-3)
  sizes = []

  class Rows(nn.Module):
    @nn.compact
    def __call__(self, x, deterministic):
      sizes.append(x.shape[0])
      return x

  out = Rows().apply({}, jnp.arange(9.0)[:, None], method=lambda m, x: layers.scan_blocks(m, (x,), 8, True))
  assert set(sizes) == {5} and np.array_equal(out[:, 0], np.arange(9.0))  # 2 blocks of 5, not 2 of 8; padding dropped
  with pytest.raises(ValueError, match="text_block=-1"):
    dataclasses.replace(cfg, text_block=-1)


@pytest.mark.minilm
def test_the_text_length_fits_the_longest_text_and_changes_no_embedding():
  """`comp.text_length`: the MiniLM tower's length clipped to the run's longest text (even with `strict`: it changes
  no output), the same embeddings as at 160 tokens; the random tower keeps its length (its position table)."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  from vidjax.data import pipeline  # pylint: disable=g-import-not-at-top
  from vidjax.methods import comp, vidclip  # pylint: disable=g-import-not-at-top
  texts = ["a man cuts an onion", "then he fries the onion in a pan with oil and salt until it is golden brown"]
  config = ml_collections.ConfigDict(dict(strict=True, model=dict(
      init="minilm", minilm_dir="", max_text_len=160, frames=4, width=16, pool_queries=4, pool_heads=2, pool_mlp=16,
      embed_dim=8, text_hidden=384, text_layers=6, text_heads=12, text_mlp=1536, init_temperature=0.07,
      dropout_rate=0.1, dtype="float32", memory_gb=0.0)))
  tokenizer = vidclip.text_tokenizer(config.model)
  longest = int(np.asarray(tokenizer(texts, max_length=160)[1]).sum(1).max())
  out, clipped = comp.text_length(config, texts)
  assert clipped == {"model.max_text_len": [160, longest]} and out.model.max_text_len == longest < 30
  assert pipeline.longest_tokens(tokenizer, texts, 10) == 10  # at most the asked length
  model, tok, fresh = vidclip.vidclip_setup(out.model, 8, 1)
  asked = vidclip.vidclip_setup(config.model, 8, 1)[0]  # the same parameters (MiniLM's 512 positions either way)
  params = fresh(jax.random.PRNGKey(0))
  embed = lambda m, n: m.apply({"params": params}, **pipeline.text_token_batch(tok, texts, n),  # noqa: E731
                               method="encode_text")
  np.testing.assert_allclose(embed(model, longest), embed(asked, 160), atol=1e-5)  # float32 on any backend
  with config.unlocked():
    config.model.init = "random"
  assert comp.text_length(config, texts) == (config, {})


def test_a_training_reads_its_texts_cut_to_their_longest_and_the_same_embeddings():
  """`vidclip.trimmed_tokens`: a training's token table cut to the longest text it reads (its rows; -1 = none), with
  the same embeddings and gradients as at the full length (BERT: padding masked, positions from the start; float32
  rounding); an LvT tower (CLS read after the padding) keeps its length."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from vidjax.methods import vidclip  # pylint: disable=g-import-not-at-top
  cfg = tiny(text=dataclasses.replace(TEXT, vocab_size=50), max_text_len=16)
  model = V.VidClip(cfg)
  params = V.init_params(model, jax.random.PRNGKey(0))
  lengths = np.array([3, 16, 5, 7, 2])
  ids = np.asarray(jax.random.randint(jax.random.PRNGKey(1), (5, 16), 1, 50))
  mask = (np.arange(16)[None] < lengths[:, None]).astype(np.int32)
  tokens = {"input_ids": ids * mask, "attention_mask": mask}
  rows = np.array([0, 2, -1, 3])  # the 16-token text (row 1) is not read: cut to row 3's 7
  cut = vidclip.trimmed_tokens(cfg, tokens, rows)
  assert {k: v.shape for k, v in cut.items()} == {"input_ids": (5, 7), "attention_mask": (5, 7)}
  np.testing.assert_array_equal(cut["input_ids"], tokens["input_ids"][:, :7])

  def loss(p, t):
    emb = model.apply({"params": p}, t["input_ids"][rows[rows >= 0]], t["attention_mask"][rows[rows >= 0]], False,
                      method="encode_text", rngs={"dropout": jax.random.PRNGKey(2)})
    return jnp.sum(emb[:, :3] ** 3), emb

  _assert_same_embeddings_and_grads(loss, params, tokens, cut, grad_atol=1e-5, grad_rtol=1e-4)
  assert vidclip.trimmed_tokens(cfg, tokens, np.array([1, 0]))["input_ids"].shape == (5, 16)
  lvt = dataclasses.replace(cfg, lvt=V.LvtText(vocabulary_size=50, model_dim=16, num_layers=1, num_heads=2, mlp_dim=32))
  assert vidclip.trimmed_tokens(lvt, tokens, rows) is tokens


def test_video_blocks_give_one_pass_gradients_in_less_memory_and_the_estimate_sizes_them():
  """`video_block`: a training step's videos in rematerialized blocks (`layers.scan_blocks`) give the one-pass
  embeddings and gradients (float32 rounding) and keep less for the backward pass (XLA's own count); the blocks
  are sized by `video_activation_bytes` from `memory_gb` (`methods.vidclip.video_block`)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from vidjax.methods import vidclip  # pylint: disable=g-import-not-at-top
  cfg = tiny(pool_queries=6, pool_mlp=64)
  x = jax.random.normal(jax.random.PRNGKey(1), (12, 4, 3, 8)) * 5.0
  params = V.init_params(V.VidClip(cfg), jax.random.PRNGKey(0), tokens_per_frame=3)

  def compiled(block):
    model = V.VidClip(dataclasses.replace(cfg, video_block=block))
    loss = lambda p: jnp.sum(model.apply({"params": p}, x, False, method="encode_video")[:, :3] ** 2)  # noqa: E731
    return jax.jit(jax.value_and_grad(loss)).lower(params).compile()

  whole, blocked = compiled(0), compiled(2)
  (l1, g1), (l2, g2) = whole(params), blocked(params)
  np.testing.assert_allclose(l2, l1, rtol=1e-5, atol=1e-6)  # float32 on any backend
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(b, a, atol=1e-5, rtol=1e-4)
  temp = lambda f: f.memory_analysis().temp_size_in_bytes  # noqa: E731
  assert temp(blocked) < temp(whole) / 2, (temp(blocked), temp(whole))
  per_video = V.video_activation_bytes(cfg, 3)
  mc = ml_collections.ConfigDict(dict(memory_gb=5.5 * per_video / 1e9))
  assert vidclip.video_block(mc, cfg, 3) == 5 and vidclip.video_block(ml_collections.ConfigDict(), cfg, 3) == 0
  with pytest.raises(ValueError, match="video_block=-1"):
    dataclasses.replace(cfg, video_block=-1)


def test_evaluation_encodes_videos_in_chunks_of_at_most_the_training_block():
  """`methods.vidclip.Encoder`: videos in chunks of `eval.chunk` but at most the model's `video_block` (what fits
  `memory_gb`), with the embeddings of one chunk (float32 rounding); texts keep `eval.chunk`; no block, no cap."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from types import SimpleNamespace  # pylint: disable=g-import-not-at-top
  from vidjax.methods import vidclip  # pylint: disable=g-import-not-at-top
  cfg = tiny(pool_queries=6, pool_mlp=64)
  tokens = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (7, 4, 3, 8))) * 5.0
  data = SimpleNamespace(gather=lambda v, f: tokens[v])  # rows -> [B, T, N, D]
  params = V.init_params(V.VidClip(cfg), jax.random.PRNGKey(0), tokens_per_frame=3)
  rows = np.arange(7)
  out = {}
  for block, chunk in ((0, 16), (2, 16), (5, 3)):
    enc = vidclip.Encoder(V.VidClip(dataclasses.replace(cfg, video_block=block)), data, chunk)
    assert (enc.chunk, enc.video_chunk) == (chunk, min(chunk, block) if block else chunk)
    out[block] = enc.videos(params, rows, rows)
  for block in (2, 5):
    np.testing.assert_allclose(out[block], out[0], rtol=1e-5, atol=1e-6)  # float32 on any backend
