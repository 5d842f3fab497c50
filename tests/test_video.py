"""Video inputs (issue #55): synthetic JPEG-frame videos made before the run, the prompt tokens they add measured on
the server and checked per row, and the simulator's Qwen2-VL-style costing (a token per merged patch per frame pair,
encoder FLOPs per patch)."""

from __future__ import annotations

import base64
import io

import pytest
import requests
from PIL import Image

from benchmarks.harness import read_rows
from tests.helpers import NO_CANARIES, analyse, parsed_options
from vllm_stress.client.checks import StopTarget, validate
from vllm_stress.client.images import message_content
from vllm_stress.client.video import VIDEO_MEDIA_TYPE, make_video_set
from vllm_stress.core import schema
from vllm_stress.simulator.api.requestlog import read_request_log
from vllm_stress.simulator.model.errors import ApiError
from vllm_stress.simulator.model.profiles import load_profile
from vllm_stress.simulator.model.vision import read_video, video_cost


def decoded_frames(url: str) -> list[Image.Image]:
    """The frames of a ``data:video/jpeg;base64,`` URL, each decoded in full."""
    assert url.startswith(VIDEO_MEDIA_TYPE)
    frames = [Image.open(io.BytesIO(base64.b64decode(part))) for part in url.removeprefix(VIDEO_MEDIA_TYPE).split(",")]
    for frame in frames:
        frame.load()
    return frames


def test_videos_are_decodable_seeded_distinct_and_of_the_asked_frames_and_size():
    videos = make_video_set(2, 5, "64x48", None, "seed")
    assert videos.pool == make_video_set(2, 5, "64x48", None, "seed").pool  # seeded
    assert videos.pool != make_video_set(2, 5, "64x48", None, "other").pool
    assert len(set(videos.pool)) == len(videos.pool) >= 2
    frames = decoded_frames(videos.pool[0])
    assert [(frame.format, frame.size) for frame in frames] == [("JPEG", (64, 48))] * 5
    assert len({frame.tobytes() for frame in frames}) == 5  # the view moves: no two frames alike
    assert len(videos.draw(__import__("random").Random(0))) == 2


def test_a_message_with_videos_puts_them_after_the_text_and_images():
    assert message_content("hi", ("data:i",), ("data:v",)) == [
        {"type": "text", "text": "hi"},
        {"type": "image_url", "image_url": {"url": "data:i"}},
        {"type": "video_url", "video_url": {"url": "data:v"}},
    ]


def test_a_video_costs_a_token_per_merged_patch_per_frame_pair():
    profile = load_profile("cpu-tiny", {"vision_params": 1e6})
    # 224 x 112 stays (multiples of 28): 8 x 4 tokens a temporal patch; 3 frames padded to 4, so 2 temporal patches
    cost = video_cost(224, 112, 3, 7, profile)
    assert (cost.tokens, cost.encoder_flops, cost.key) == (2 * 32, 2 * 1e6 * 2 * 32 * 4, 7)
    assert video_cost(224, 112, 1, 0, profile).tokens == 32
    assert video_cost(224, 112, 100, 0, profile).tokens == 16 * 32  # vLLM keeps 32 frames of a JPEG sequence


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("data:video/mp4;base64,AAAA", "data:video/jpeg"),
        ("https://example.com/cat.mp4", "data:video/jpeg"),
        (VIDEO_MEDIA_TYPE + "not base64!", "not valid base64"),
        (VIDEO_MEDIA_TYPE + base64.b64encode(b"not a frame").decode(), "cannot read a frame"),
    ],
)
def test_the_simulator_refuses_a_malformed_video(url, message):
    with pytest.raises(ApiError, match=message):
        read_video(url, load_profile("cpu-tiny"))


def test_the_simulator_refuses_frames_of_different_sizes():
    small, large = (make_video_set(1, 1, size, None, "s").pool[0] for size in ("32x32", "64x32"))
    with pytest.raises(ApiError, match="differ in size"):
        read_video(small + "," + large.removeprefix(VIDEO_MEDIA_TYPE), load_profile("cpu-tiny"))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--videos", "-1"], "--videos must be at least 0"),
        (["--videos", "1", "--video-frames", "0"], "--video-frames must be at least 1"),
        (["--videos", "1", "--video-size", "big"], "--video-size: expected WIDTHxHEIGHT"),
        (["--videos", "1", "--video-fps", "0"], "--video-fps must be more than 0"),
    ],
)
def test_bad_video_options_are_refused_before_the_run(flags, message):
    with pytest.raises(StopTarget, match=message):
        validate(parsed_options(*flags))


VIDEO_TOKENS = 2 * 8 * 4 + 2  # by hand: 3 frames of 224 x 112 in 2 temporal patches of 8 x 4 tokens; vision start, end
VIDEO_RUN = ["-u", "1", "-r", "1", "-t", "3s", "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES]
VIDEO_RUN += ["--input-tokens", "32", "--output-tokens", "4", "--videos", "2", "--video-frames", "3"]
VIDEO_RUN += ["--video-size", "224x112", "--video-fps", "2"]


def test_video_tokens_are_exact_per_row_and_match_the_servers_log(run_locust, simulator, tmp_path):
    """Every row's prompt tokens are its text's plus two videos' as the simulator costs them, the same the simulator
    logged for that request; the report gives the videos' tokens and share of the prompt; a malformed video gets
    vLLM's 400 error body."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.02", "--request-log", str(log))
    proc = run_locust("-f", "locustfiles/chat.py", *VIDEO_RUN, "-H", sim.url, "--results-dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    bad = {"max_tokens": 1, "messages": [{"role": "user", "content": message_content("hi", (), ("x",))}]}
    refused = requests.post(f"{sim.url}/v1/chat/completions", json=bad, timeout=10)
    sim.stop()  # flushes the log
    assert refused.status_code == 400
    assert refused.json()["error"] | {"message": ""} == {
        "message": "",
        "type": "BadRequestError",
        "param": "messages",
        "code": 400,
    }
    rows = [row for row in read_rows(tmp_path / "run" / schema.REQUESTS_FILE) if row["ok"] == "1"]
    assert len(rows) >= 4
    assert {(row["videos"], row["video_tokens"], row["count_mismatch"]) for row in rows} == {
        ("2", str(2 * VIDEO_TOKENS), "0")
    }
    assert {int(row["prompt_tokens"]) for row in rows} == {32 + 2 * VIDEO_TOKENS}
    logged = read_request_log(str(log))
    assert all(logged[row["request_id"]]["prompt_tokens"] == int(row["prompt_tokens"]) for row in rows)
    assert all(int(row["video_bytes"]) > 2 * 3 * 224 * 112 // 4 for row in rows)  # noise barely compresses
    (level,) = analyse(tmp_path / "run", tmp_path / "report")["levels"]
    assert level["video_tokens_mean"] == 2 * VIDEO_TOKENS and level["image_tokens_mean"] is None
    assert level["video_prompt_share"] == pytest.approx(2 * VIDEO_TOKENS / (32 + 2 * VIDEO_TOKENS))
