"""transformers' Emu3 / Janus / Chameleon image generators from a local folder (tiny random
configs saved in-process): the adapter's greedy `ar` equals a plain full-sequence loop over the
model's own modules, parallel decoders equal `ar` where they are exact, images decode, and the
batch CLI writes them."""
import json
import os

import pytest
import torch

K = 16


def tiny(family: str):
    import transformers as tf
    torch.manual_seed(0)
    text = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    vocab_map = {f"<|visual token {i:06d}|>": 40 + i for i in range(K)}
    if family == "emu3":
        vocab_map.update({"<|extra_200|>": 39, "<image>": 38})
        vq = dict(codebook_size=K, embed_dim=4, latent_channels=4, base_channels=32, channel_multiplier=[1, 1],
                  num_res_blocks=1, attn_resolutions=[], temporal_downsample_factor=2, hidden_size=32)
        model = tf.Emu3ForConditionalGeneration(tf.Emu3Config(vq_config=vq, text_config=text, vocabulary_map=vocab_map))
    elif family == "chameleon":
        vocab_map = {f"IMGIMG{chr(65 + i // 10)}{chr(65 + i % 10)}Z": 40 + i for i in range(K)}
        vocab_map.update({"<image>": 38, "<racm3:break>": 37})
        vq = dict(embed_dim=8, num_embeddings=K, base_channels=32, channel_multiplier=[1, 1], num_res_blocks=1,
                  attn_resolutions=[], resolution=8, latent_channels=8)
        model = tf.ChameleonForConditionalGeneration(tf.ChameleonConfig(**text, vq_config=vq, vocabulary_map=vocab_map))
    else:
        cfg = tf.JanusConfig(text_config=dict(model_type="llama", **text),
                             vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                num_attention_heads=4, image_size=32, patch_size=8, num_image_tokens=16),
                             vq_config=dict(num_embeddings=K, embed_dim=8, base_channels=32, channel_multiplier=[1, 1],
                                            num_res_blocks=1, image_token_embed_dim=32, num_patches=4,
                                            projection_dim=32, hidden_size=32, latent_channels=8))
        model = tf.JanusForConditionalGeneration(cfg)
    with torch.no_grad():   # sharpen so greedy paths are not decided by float noise
        head = model.model.generation_head.vision_head if family == "janus" else model.lm_head
        head.weight.mul_(8.0)
    return model.eval()


@pytest.fixture(scope="module", params=["emu3", "janus", "chameleon"])
def folder(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    tiny(request.param).save_pretrained(path)
    return str(path)


GRID = {"emu3": (3, 4), "janus": None, "chameleon": None}     # Janus 4x4 and Chameleon 4x4 from their configs


def reference_greedy(hf, prompt: list[int], grid) -> torch.Tensor:
    """Greedy codes from full uncached forwards over the model's own modules (no suite)."""
    m, fam = hf.model, hf.family
    h, w = grid
    codes: list[int] = []
    with torch.no_grad():
        for i in range(h * w):
            if fam == "janus":
                e = torch.cat([m.get_input_embeddings()(torch.tensor([prompt])),
                               m.prepare_embeddings_for_image_generation(torch.tensor([codes], dtype=torch.long))], 1)
                logits = m.model.generation_head(m.model.language_model(inputs_embeds=e).last_hidden_state[:, -1])
            else:
                vm = m.model.vocabulary_mapping
                ids, cells = list(prompt), 0
                for c in codes:                       # Emu3 rows end with the end-of-line token
                    ids.append(vm.image_tokens[c])
                    cells += 1
                    if fam == "emu3" and cells % w == 0:
                        ids.append(vm.eol_token_id)
                base = m.model.text_model if fam == "emu3" else m.model
                hidden = base(input_ids=torch.tensor([ids])).last_hidden_state[:, -1]
                logits = m.lm_head(hidden)[:, vm.image_tokens]
            codes.append(int(logits.argmax(-1)))
    return torch.tensor(codes).reshape(h, w)


def test_ar_equals_the_models_own_greedy_loop(folder):
    from vision.hf_image import load_hf_image_model
    hf = load_hf_image_model(folder)
    prompt = [1, 5, 9, 7]
    res = hf.generate(torch.tensor([prompt]), decoder="ar", grid=GRID[hf.family], temperature=0.0)
    grid = tuple(res.tokens.shape[1:])
    assert torch.equal(res.tokens[0], reference_greedy(hf, prompt, grid))
    h, w = grid
    assert res.stats.num_forwards == h * (w + (hf.family == "emu3"))
    if hf.family == "chameleon":
        assert res.images is None                      # transformers ships no Chameleon VQ decoder
    else:
        assert len(res.images) == 1 and res.images[0].size[0] > 0


@pytest.mark.parametrize("decoder, options", [("zipar", {"window": 99}), ("sjd", {"init": "left"}),
                                              ("zipar_sjd", {"window": 99, "draft_len": 3})])
def test_exact_decoders_equal_ar(folder, decoder, options):
    """Greedy fp32, two prompts, CFG on: zipar with a full-row window, sjd and zipar_sjd equal ar."""
    from vision.hf_image import load_hf_image_model
    hf = load_hf_image_model(folder)
    grid = GRID[hf.family] or hf.default_grid()
    width = grid[1] + (hf.family == "emu3")
    if "window" in options:
        options = {**options, "window": width}
    ids = torch.tensor([[1, 5, 9, 7], [1, 3, 4, 7]])
    ar = hf.generate(ids, decoder="ar", grid=grid, temperature=0.0, guidance_scale=2.0)
    out = hf.generate(ids, decoder=decoder, grid=grid, temperature=0.0, guidance_scale=2.0, **options)
    assert torch.equal(out.tokens, ar.tokens)
    assert out.stats.num_forwards <= ar.stats.num_forwards


def test_cli_writes_images_and_rejects_bad_folders(folder, tmp_path):
    from vision.generate import main
    from vision.hf_image import load_hf_image_model
    out = tmp_path / "out"
    argv = ["--hf-model", folder, "--prompt-ids", "1,5,9,7", "--num-per-label", "2", "--decoder", "zipar",
            "--option", "window=2", "--out", str(out)]
    if GRID[load_hf_image_model(folder).family]:
        argv += ["--grid", "3", "4"]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["num_images"] == 2 and manifest["family"] in folder
    files = sorted(os.listdir(out))
    assert "tokens.pt" in files and torch.load(out / "tokens.pt").shape[0] == 2
    assert main(["--hf-model", str(tmp_path / "nope"), "--prompt-ids", "1", "--out", str(tmp_path / "o2")]) == 2
    assert not (tmp_path / "o2").exists()
