"""Image inputs (issue #28): synthetic images made before the run, the prompt tokens they add measured on the server
and checked per row, and the simulator's Qwen-VL-style costing (smart_resize tokens, prefill and encoder time)."""

from __future__ import annotations

import base64
import io
import statistics

import pytest
from PIL import Image

from benchmarks.harness import read_rows
from tests.helpers import NO_CANARIES, analyse, parsed_options
from vllm_stress.client.checks import StopTarget, validate
from vllm_stress.client.images import make_image_set, message_content, parse_size
from vllm_stress.core import schema
from vllm_stress.simulator.engine.steptime import StepTimeModel
from vllm_stress.simulator.model.errors import ApiError
from vllm_stress.simulator.model.profiles import load_profile
from vllm_stress.simulator.model.vision import image_cost, read_image, smart_resize

QWEN2_VL = dict(factor=28, min_pixels=56 * 56, max_pixels=14 * 14 * 4 * 1280)  # its image processor's defaults


@pytest.mark.parametrize(
    ("height", "width", "resized"),
    [
        (448, 448, (448, 448)),  # multiples of 28 stay
        (384, 512, (392, 504)),  # each side rounded to the nearest multiple of 28
        (10, 30, (56, 112)),  # under min_pixels: scaled up (aspect kept), then rounded up
        (4000, 3000, (1148, 840)),  # over max_pixels: scaled down to fit, rounded down
    ],
)
def test_smart_resize_rounds_to_the_patch_grid_within_the_pixel_bounds(height, width, resized):
    assert smart_resize(height, width, **QWEN2_VL) == resized
    assert resized[0] * resized[1] <= QWEN2_VL["max_pixels"]


def test_an_image_costs_a_token_per_merged_patch_and_two_flops_per_encoder_parameter_per_patch():
    profile = load_profile("cpu-tiny", {"vision_params": 1e6})
    cost = image_cost(512, 384, 7, profile)  # resized to 504 x 392: 18 x 14 tokens of 28 x 28 pixels
    assert (cost.tokens, cost.encoder_flops, cost.key) == (18 * 14, 2 * 1e6 * 18 * 14 * 4, 7)
    qwen3_vl = load_profile("mi325x-qwen3-235b-tp8")  # 16-pixel patches, 2 x 2 merge: a token per 32 x 32
    assert image_cost(1024, 1024, 0, qwen3_vl).tokens == 32 * 32


def test_images_are_seeded_distinct_and_of_the_asked_size_and_format():
    first = make_image_set(2, "64x32", "png", 3, "seed")
    assert first.pool == make_image_set(2, "64x32", "png", 3, "seed").pool  # seeded
    assert len(set(first.pool)) == 3 and make_image_set(2, "64x32", "png", 3, "other").pool != first.pool
    image = Image.open(io.BytesIO(base64.b64decode(first.pool[0].split(",", 1)[1])))
    assert (image.format, image.size) == ("PNG", (64, 32))
    assert first.pool[0].startswith("data:image/png;base64,")
    assert make_image_set(1, "8x8", "jpeg", 1, "s").pool[0].startswith("data:image/jpeg;base64,")
    assert len(first.draw(__import__("random").Random(0))) == 2


def test_a_message_with_images_puts_the_text_first_and_one_image_url_part_per_image():
    assert message_content("hi", ()) == "hi"
    assert message_content("hi", ("data:a", "data:b")) == [
        {"type": "text", "text": "hi"},
        {"type": "image_url", "image_url": {"url": "data:a"}},
        {"type": "image_url", "image_url": {"url": "data:b"}},
    ]


def test_the_simulator_reads_each_image_of_a_pool_once():
    profile, pool = load_profile("cpu-tiny"), make_image_set(1, "64x32", "png", 2, "seed").pool
    before = read_image.cache_info()
    costs = [read_image(url, profile) for url in pool * 3]
    after = read_image.cache_info()
    assert costs[:2] == costs[2:4] == costs[4:] and costs[0].key != costs[1].key
    assert (after.misses - before.misses, after.hits - before.hits) == (2, 4)


@pytest.mark.parametrize("size", ["512", "0x10", "axb", "10x"])
def test_a_bad_image_size_is_refused(size):
    with pytest.raises(ValueError, match="WIDTHxHEIGHT"):
        parse_size(size)


def test_the_simulator_takes_only_image_data_urls():
    profile = load_profile("cpu-tiny")
    with pytest.raises(ApiError, match="data:image"):
        read_image("https://example.com/cat.png", profile)
    with pytest.raises(ApiError, match="cannot read the image"):
        read_image("data:image/png;base64," + base64.b64encode(b"not an image").decode(), profile)


SMALL, LARGE = "224x224", "896x896"
# by hand: 224 / 28 = 8 and 896 / 28 = 32 tokens a side (14-pixel patches merged 2 x 2), inside the pixel bounds
IMAGE_TOKENS = {SMALL: 8 * 8, LARGE: 32 * 32}
VISION_PARAMS = 5e6
# a slow device (a quarter of cpu-tiny's FLOP/s): the prefill of the larger image takes ~0.3 s, far above what its
# 0.8 MB body costs to send and parse; the whole prompt in one step; no step-time jitter
VISION_SET = [
    "flops=1e12",
    "max_num_batched_tokens=8192",
    f"vision_params={VISION_PARAMS:g}",
    "t_fixed=0.02",
    "jitter=0",
]
IMAGE_RUN = ["-u", "1", "-r", "1", "-t", "3s", "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES]
IMAGE_RUN += ["--input-tokens", "32", "--output-tokens", "4", "--images", "1", "--image-pool", "4"]


def test_image_tokens_are_exact_per_row_and_ttft_grows_as_the_profiles_prefill_rate_says(
    run_locust, simulator, tmp_path
):
    """Two image sizes, one user each against one simulator (every prefill alone in its step, no jitter): every row's
    prompt tokens are its text's plus its image's, as the server counted them; the TTFT medians differ by what the
    profile's step-time model gives for the two prompts' prefill steps, encoder work included."""
    sim = simulator("--profile", "cpu-tiny", *(arg for field in VISION_SET for arg in ("--set", field)))
    profile = load_profile("cpu-tiny", dict(field.split("=") for field in VISION_SET))
    steps, ttfts = {}, {}
    for size in (SMALL, LARGE):
        out = tmp_path / size
        proc = run_locust(
            "-f", "locustfiles/chat.py", *IMAGE_RUN, "--image-size", size, "-H", sim.url, "--results-dir", str(out)
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = [row for row in read_rows(out / schema.REQUESTS_FILE) if row["ok"] == "1"]
        assert len(rows) >= 4
        width, height = parse_size(size)
        tokens = IMAGE_TOKENS[size]
        assert {(row["images"], row["image_tokens"], row["count_mismatch"]) for row in rows} == {
            ("1", str(tokens + 2), "0")  # the image's tokens between <|vision_start|> and <|vision_end|>
        }
        assert {int(row["prompt_tokens"]) for row in rows} == {32 + tokens + 2}
        assert all(int(row["image_bytes"]) > width * height // 2 for row in rows)  # noise barely compresses
        prompt = 32 + tokens + 2
        encoder_flops = 2 * VISION_PARAMS * tokens * 4  # 2 FLOPs per parameter per 14 x 14 patch, 4 to a token
        steps[size] = StepTimeModel(profile).ideal(prompt, prompt * prompt / 2, prompt, encoder_flops=encoder_flops)
        ttfts[size] = statistics.median(float(row["ttft_s"]) for row in rows)
        level = analyse(out, tmp_path / f"report-{size}")["levels"][0]
        assert level["image_tokens_mean"] == tokens + 2 and level["image_bytes_mean"] > 0
    expected = steps[LARGE] - steps[SMALL]
    assert ttfts[LARGE] - ttfts[SMALL] == pytest.approx(expected, rel=0.15), (ttfts, steps)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--images", "-1"], "--images must be at least 0"),
        (["--images", "1", "--image-size", "big"], "--image-size: expected WIDTHxHEIGHT"),
        (["--images", "1", "--image-pool", "0"], "--image-pool must be at least 1"),
    ],
)
def test_bad_image_options_are_refused_before_the_run(flags, message):
    with pytest.raises(StopTarget, match=message):
        validate(parsed_options(*flags))
