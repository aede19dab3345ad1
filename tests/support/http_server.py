#!/usr/bin/env python3
"""A small HTTP server for convoy's source tests, on a free loopback port.

Serves static files from --root (a Helm chart repository) and, with --git, Git repositories
under --root through `git http-backend` (smart HTTP). --auth user:pass requires HTTP basic
auth. --cert and --key serve HTTPS instead. --redirect PATH=URL answers a request for a path
under PATH with a redirect to URL followed by the rest of the path. Prints the port on the first line of stdout, then serves until killed.
"""
import argparse
import base64
import http.server
import os
import ssl
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--auth")
    parser.add_argument("--git", action="store_true")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--redirect")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    expected = None
    if args.auth:
        expected = "Basic " + base64.b64encode(args.auth.encode()).decode()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=root, **kw)

        def log_message(self, fmt, *a):
            sys.stderr.write("http: " + (fmt % a) + "\n")

        def authorized(self):
            if expected is None or self.headers.get("Authorization") == expected:
                return True
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="convoy-test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return False

        def do_GET(self):
            if not self.authorized():
                return
            if args.redirect:
                under, _, to = args.redirect.partition("=")
                if self.path.startswith(under):
                    self.send_response(302)
                    self.send_header("Location", to + self.path[len(under):])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            if args.git:
                return self.git()
            return super().do_GET()

        def do_POST(self):
            if not self.authorized():
                return
            if args.git:
                return self.git()
            self.send_error(405)

        def git(self):
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            env = dict(os.environ)
            env.update({
                "GIT_PROJECT_ROOT": root,
                "GIT_HTTP_EXPORT_ALL": "1",
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "REQUEST_METHOD": self.command,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": "test",
                "REMOTE_ADDR": "127.0.0.1",
            })
            if self.headers.get("Content-Encoding") == "gzip":
                env["HTTP_CONTENT_ENCODING"] = "gzip"
            proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
            head, _, payload = proc.stdout.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.split(b"\r\n"):
                if not line:
                    continue
                key, _, value = line.decode().partition(":")
                if key.lower() == "status":
                    status = int(value.strip().split()[0])
                else:
                    headers.append((key, value.strip()))
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if args.cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.cert, args.key)
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
