"""A loopback stand-in for two GPU exporters with known values: NVIDIA's DCGM exporter (two GPUs, at
``/dcgm/metrics``) and AMD's device-metrics-exporter (one GPU, at ``/amd/metrics``), under their published metric
names (docs/concepts/analysis.md, "Capacity planning"). ``python -m tests.gpuexporter PORT`` serves it until killed
(to write the format fixture, docs/concepts/formats.md)."""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DCGM = """\
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3"} 250.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",modelName="NVIDIA H100 80GB HBM3"} 300.25
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3"} 80
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",modelName="NVIDIA H100 80GB HBM3"} 90
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3"} 70000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b",modelName="NVIDIA H100 80GB HBM3"} 71000
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3"} 1980
"""
AMD = """\
# HELP gpu_package_power Current socket power in Watts
# TYPE gpu_package_power gauge
gpu_package_power{gpu_id="0",card_model="MI300X",hostname="h"} 500
# HELP gpu_power_usage GPU power usage in Watts
# TYPE gpu_power_usage gauge
gpu_power_usage{gpu_id="0",card_model="MI300X",hostname="h"} 999
# HELP gpu_gfx_activity Graphics engine usage percentage (0 - 100)
# TYPE gpu_gfx_activity gauge
gpu_gfx_activity{gpu_id="0",card_model="MI300X",hostname="h"} 70
# HELP gpu_used_vram Total VRAM memory used in MB
# TYPE gpu_used_vram gauge
gpu_used_vram{gpu_id="0",card_model="MI300X",hostname="h"} 150000
"""
PAGES = {"/dcgm/metrics": DCGM, "/amd/metrics": AMD}
POWER_W = 250.5 + 300.25 + 500  # gpu_package_power, not gpu_power_usage: the first of AMD's names a GPU has
UTILIZATION_PERCENT = (80 + 90 + 70) / 3


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = PAGES.get(self.path, "").encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
        pass


def start(port: int = 0) -> ThreadingHTTPServer:
    """The exporters on 127.0.0.1 (``port`` 0: a free one), served from a daemon thread; ``shutdown()`` stops them."""
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def urls(server: ThreadingHTTPServer) -> list[str]:
    return [f"http://127.0.0.1:{server.server_address[1]}{path}" for path in PAGES]


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
