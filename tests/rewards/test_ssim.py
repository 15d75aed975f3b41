"""SSIM against its definition (Wang et al. 2004, eqs. 13-14 with the Gaussian window) and its known properties."""

import numpy as np
import pytest

from posttrain.rewards.ssim import gaussian_window, luma, ssim, ssim_map

C1, C2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2


def reference_ssim(x, y):
    """The paper's formula, one window position at a time: weighted means, variances and covariance under the
    normalised 11x11 Gaussian (sigma 1.5), averaged over every position where the window fits."""
    w = np.outer(gaussian_window(), gaussian_window())
    k = w.shape[0]
    vals = []
    for i in range(x.shape[0] - k + 1):
        for j in range(x.shape[1] - k + 1):
            a, b = x[i : i + k, j : j + k], y[i : i + k, j : j + k]
            mx, my = (w * a).sum(), (w * b).sum()
            vx, vy = (w * (a - mx) ** 2).sum(), (w * (b - my) ** 2).sum()
            cxy = (w * (a - mx) * (b - my)).sum()
            vals.append(((2 * mx * my + C1) * (2 * cxy + C2)) / ((mx**2 + my**2 + C1) * (vx + vy + C2)))
    return float(np.mean(vals))


def test_window_is_the_standard_gaussian():
    g = gaussian_window()
    assert g.shape == (11,) and g.sum() == pytest.approx(1.0)
    assert g[5] == g.max() and np.allclose(g, g[::-1])
    assert g[4] / g[5] == pytest.approx(np.exp(-1 / (2 * 1.5**2)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_the_reference_formula_on_small_arrays(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (17, 20)).astype(float)
    y = np.clip(x + rng.normal(0, 30, x.shape), 0, 255)
    assert ssim(x, y) == pytest.approx(reference_ssim(x, y), abs=1e-10)
    z = rng.integers(0, 256, (17, 20)).astype(float)  # unrelated image: low or negative SSIM
    assert ssim(x, z) == pytest.approx(reference_ssim(x, z), abs=1e-10)


def test_constant_images_have_the_closed_form():
    a, b = 100.0, 150.0
    x, y = np.full((16, 16), a), np.full((16, 16), b)
    assert ssim(x, y) == pytest.approx((2 * a * b + C1) / (a**2 + b**2 + C1))


def test_properties():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (32, 32)).astype(float)
    y = np.clip(x + rng.normal(0, 20, x.shape), 0, 255)
    assert ssim(x, x) == pytest.approx(1.0)
    assert ssim(x, y) == pytest.approx(ssim(y, x))  # symmetric
    assert ssim(x, y) < 1.0
    noisier = np.clip(x + rng.normal(0, 60, x.shape), 0, 255)
    assert ssim(x, noisier) < ssim(x, y)  # more distortion, lower score
    assert -1.0 <= ssim(x, 255 - x) < 0.0  # an inverted image anti-correlates
    assert ssim_map(x, y).shape == (22, 22)


def test_luma_weights_and_shape_errors():
    px = np.array([[[255, 0, 0, 255], [0, 255, 0, 0], [0, 0, 255, 128]]], dtype=np.uint8)
    assert luma(px)[0].tolist() == pytest.approx([0.299 * 255, 0.587 * 255, 0.114 * 255])
    with pytest.raises(ValueError, match="one shape"):
        ssim(np.zeros((16, 16)), np.zeros((16, 17)))
    with pytest.raises(ValueError, match="smaller than"):
        ssim(np.zeros((8, 8)), np.zeros((8, 8)))
