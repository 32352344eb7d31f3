"""A tiny HTTP app for the steps example: answers every GET with torch's version and the file a step wrote."""

import argparse
import http.server
from pathlib import Path

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=8000)
args = parser.parse_args()
greeting = Path("/opt/data/greeting.txt").read_text().strip()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = f"{greeting} from torch {torch.__version__}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(("0.0.0.0", args.port), Handler).serve_forever()
