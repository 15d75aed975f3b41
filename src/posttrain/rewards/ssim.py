"""SSIM (Wang, Bovik, Sheikh & Simoncelli 2004) as pure numpy functions on grayscale images.

Covers: `luma` (ITU-R BT.601 weights, as MATLAB's rgb2gray and the SSIM
reference code use), `gaussian_window` (11 taps, sigma 1.5, normalised) and
`ssim` (mean SSIM over the 'valid' region: the window never leaves the
image, as in the authors' MATLAB `ssim_index`), with K1 = 0.01, K2 = 0.03 and
population (not sample) statistics under the Gaussian weights.
Does not cover: multi-scale SSIM, colour SSIM, or the downsampling step the
MATLAB code applies to large images (the caller fixes the raster size).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def luma(rgb: np.ndarray) -> np.ndarray:
    """[H, W, 3 or 4] uint8/float RGB(A) -> [H, W] float64 luma in the input's range (alpha ignored)."""
    rgb = np.asarray(rgb, dtype=np.float64)
    if rgb.ndim == 2:
        return rgb
    return rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114


def gaussian_window(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    """[size] 1-D Gaussian taps summing to 1; the 2-D window is their outer product (separable)."""
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = np.exp(-(x**2) / (2.0 * sigma**2))
    return g / g.sum()


def _filter_valid(img: np.ndarray, g: np.ndarray) -> np.ndarray:
    """[H, W] -> [H-k+1, W-k+1]: correlation with the separable window outer(g, g), 'valid' region."""
    rows = sliding_window_view(img, len(g), axis=1) @ g  # [H, W-k+1]
    return sliding_window_view(rows, len(g), axis=0) @ g  # [H-k+1, W-k+1]


def ssim_map(
    x: np.ndarray, y: np.ndarray, data_range: float = 255.0, window: np.ndarray | None = None, k1: float = 0.01, k2: float = 0.03
) -> np.ndarray:
    """[H, W] x2 -> [H-k+1, W-k+1] local SSIM values."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"ssim: need two 2-D images of one shape, got {x.shape} and {y.shape}")
    g = gaussian_window() if window is None else np.asarray(window, dtype=np.float64)
    if min(x.shape) < len(g):
        raise ValueError(f"ssim: images {x.shape} are smaller than the {len(g)}-tap window")
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    mu_x, mu_y = _filter_valid(x, g), _filter_valid(y, g)
    var_x = _filter_valid(x * x, g) - mu_x**2
    var_y = _filter_valid(y * y, g) - mu_y**2
    cov = _filter_valid(x * y, g) - mu_x * mu_y
    num = (2 * mu_x * mu_y + c1) * (2 * cov + c2)
    den = (mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2)
    return num / den


def ssim(x: np.ndarray, y: np.ndarray, data_range: float = 255.0) -> float:
    """Mean SSIM of two same-shape grayscale images (1.0 only when they are identical; may be negative)."""
    return float(ssim_map(x, y, data_range).mean())
