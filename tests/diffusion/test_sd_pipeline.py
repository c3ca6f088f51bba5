"""ELFATT-SD in a small random Stable Diffusion pipeline (built from configs, nothing
downloaded). The pipeline's text encoder needs transformers, which the default
environment leaves out (it breaks mmpretrain 1.2.0): this file is skipped there and
runs where transformers is installed (docs/stable_diffusion.md)."""
import json

import pytest
import torch

diffusers = pytest.importorskip('diffusers')
transformers = pytest.importorskip('transformers')

from mmhybrid.diffusion import apply_patch  # noqa: E402
from mmhybrid.diffusion import processor as processor_module  # noqa: E402
from tests.diffusion.test_sd_patch import FULL_RES_ATTN, LATENT, tiny_unet  # noqa: E402


def tiny_tokenizer(tmp_path):
    """A CLIP BPE tokenizer over a made-up vocabulary (no download)."""
    letters = [chr(c) for c in range(ord('a'), ord('z') + 1)]
    tokens = ['<|startoftext|>', '<|endoftext|>', '!'] + letters + [c + '</w>' for c in letters]
    (tmp_path / 'vocab.json').write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (tmp_path / 'merges.txt').write_text('#version: 0.2\n')
    return transformers.CLIPTokenizer(str(tmp_path / 'vocab.json'), str(tmp_path / 'merges.txt'),
                                      model_max_length=12)


def tiny_pipeline(tmp_path, scheduler):
    torch.manual_seed(0)
    tokenizer = tiny_tokenizer(tmp_path)
    text_encoder = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=12, bos_token_id=0, eos_token_id=1,
        pad_token_id=1)).eval()
    vae = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32),
        norm_num_groups=16, down_block_types=('DownEncoderBlock2D',) * 2,
        up_block_types=('UpDecoderBlock2D',) * 2).eval()
    return diffusers.StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=tiny_unet(),
        scheduler=scheduler, safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)


@pytest.mark.parametrize('scheduler_cls,steps,elfatt_steps,expected', [
    ('DDIMScheduler', 5, 0.4, [0, 1]),
    ('EulerDiscreteScheduler', 4, 0.2, [0]),  # round(0.8) = 1 step; float timesteps
])
def test_pipeline_switches_at_the_right_step(tmp_path, monkeypatch, scheduler_cls, steps,
                                             elfatt_steps, expected):
    scheduler = getattr(diffusers, scheduler_cls)(beta_start=0.00085, beta_end=0.012,
                                                  beta_schedule='scaled_linear')
    pipe = tiny_pipeline(tmp_path, scheduler)
    apply_patch(pipe, ratio=0.5, elfatt_steps=elfatt_steps, block_size=32, agent_tokens=16)
    tracker = pipe.unet.attn_processors[FULL_RES_ATTN[0]].tracker
    steps_seen, elfatt_calls = [], []
    pipe.unet.register_forward_pre_hook(
        lambda module, args: steps_seen.append((tracker.step_index, tracker.elfatt_active)))

    def counting(*args, **kwargs):
        elfatt_calls.append(tracker.step_index)
        return elfatt_sd_attention(*args, **kwargs)

    elfatt_sd_attention = processor_module.elfatt_sd_attention
    monkeypatch.setattr(processor_module, 'elfatt_sd_attention', counting)
    image = pipe('a red fox', num_inference_steps=steps, guidance_scale=7.5, height=2 * LATENT,
                 width=2 * LATENT, output_type='np', generator=torch.Generator().manual_seed(0)
                 ).images
    assert image.shape == (1, 2 * LATENT, 2 * LATENT, 3) and torch.isfinite(
        torch.from_numpy(image)).all()
    assert [s for s, _ in steps_seen] == list(range(steps))
    assert [s for s, active in steps_seen if active] == expected
    # 3 full-resolution self-attention layers per call; CFG runs in one batch
    assert elfatt_calls == [s for s in expected for _ in FULL_RES_ATTN]
