"""The VQ image tokenizer: a diffusers `VQModel` (so real VQ checkpoints of that class load
through the same code), images (B, 3, H*f, W*f) in [-1, 1] <-> codes (B, H, W)."""
from __future__ import annotations

import os

import torch

DEFAULT_VQ_CONFIG = dict(
    in_channels=3, out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 3,      # 3 blocks -> 2 downsamplings: 64x64 -> 16x16
    up_block_types=("UpDecoderBlock2D",) * 3,
    block_out_channels=(32, 64, 64), layers_per_block=1, latent_channels=32,
    num_vq_embeddings=256, vq_embed_dim=32, norm_num_groups=16, sample_size=64,
)


def build_vq(**overrides):
    from diffusers import VQModel
    return VQModel(**{**DEFAULT_VQ_CONFIG, **overrides})


class VQTokenizer:
    """Encode images to codebook indices and decode indices back to images."""

    def __init__(self, vq):
        self.vq = vq.eval()
        down = len(vq.config.block_out_channels) - 1
        self.factor = 2 ** down
        self.codebook_size = int(vq.config.num_vq_embeddings)

    @classmethod
    def load(cls, folder: str) -> "VQTokenizer":
        from diffusers import VQModel
        require_files(folder, ("config.json", "diffusion_pytorch_model.safetensors"), "python -m vision.train tokenizer")
        try:
            vq = VQModel.from_pretrained(folder)
        except Exception as e:  # a truncated or foreign file
            raise ValueError(f"cannot load the VQ tokenizer from {folder}: {e}; "
                             "re-create it with `python -m vision.train tokenizer`") from e
        return cls(vq)

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H*f, W*f) in [-1, 1] -> (B, H, W) long codes."""
        h = self.vq.encode(images).latents
        _, _, (_, _, idx) = self.vq.quantize(h)
        return idx.reshape(h.shape[0], h.shape[2], h.shape[3])

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """(B, H, W) long codes (on any device: moved once to the tokenizer's) -> (B, 3, H*f, W*f) in [-1, 1]."""
        codes = codes.to(self.vq.device)
        b, hh, ww = codes.shape
        z = self.vq.quantize.get_codebook_entry(codes.reshape(b, -1), (b, hh, ww, self.vq.config.vq_embed_dim or
                                                                         self.vq.config.latent_channels))
        return self.vq.decode(z, force_not_quantize=True).sample


def require_files(folder: str, names, fix: str) -> None:
    """Fail with the fix spelled out when `folder` or one of its files `names` is missing."""
    if not os.path.isdir(folder):
        raise ValueError(f"weights folder {folder} does not exist; create it with `{fix}`")
    missing = [n for n in names if not os.path.isfile(os.path.join(folder, n))]
    if missing:
        raise ValueError(f"weights folder {folder} lacks {', '.join(missing)}; re-create it with `{fix}`")
