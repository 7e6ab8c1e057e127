#!/usr/bin/env python3
"""A local stand-in for the Hugging Face Hub (and ModelScope), for Pagoda's download tests.

It serves repositories made from local directories and speaks the part of the Hub's HTTP API
that Pagoda uses:
  GET /api/models/{org}/{name}/revision/{rev}?blobs=true   file list, sizes, checksums
  GET /{org}/{name}/resolve/{rev}/{path}                   a file; LFS files by a 302 to /cdn/
  GET /cdn/{sha256}                                        the "CDN" (HTTP Range supported)
  GET /api/v1/models/{org}/{name}/repo/files?Revision=..   ModelScope's file list
  GET /api/v1/models/{org}/{name}/repo?Revision=..&FilePath=..   ModelScope's file
Errors carry the Hub's X-Error-Code header (RepositoryNotFound, GatedRepo, RevisionNotFound,
EntryNotFound). Faults for tests: a gated repo (401 without `Authorization: Bearer`), a file cut
off after N bytes the first time it is sent, a file served with one byte changed (so its
checksum is wrong). Every request is appended to --log as one JSON line.

  fake_hub.py --port-file F --log L --repo org/name=DIR [--gated org/name]
              [--cut PATH:N] [--corrupt PATH] [--token T]
"""
import argparse
import hashlib
import http.server
import json
import os
import socket
import sys
import threading
import urllib.parse

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, repo_id, directory):
        self.repo_id = repo_id
        self.files = {}  # path -> bytes
        for root, _, names in os.walk(directory, followlinks=True):
            for name in names:
                full = os.path.join(root, name)
                rel = os.path.relpath(full, directory).replace(os.sep, "/")
                with open(full, "rb") as f:
                    self.files[rel] = f.read()
        listing = "".join(f"{p}\0{hashlib.sha256(d).hexdigest()}\n"
                          for p, d in sorted(self.files.items()))
        self.commit = hashlib.sha1(listing.encode()).hexdigest()
        self.gated = False

    def is_lfs(self, path):
        return path.endswith(LFS_SUFFIXES)

    def siblings(self):
        out = []
        for path, data in sorted(self.files.items()):
            entry = {"rfilename": path, "size": len(data), "blobId": git_blob_id(data)}
            if self.is_lfs(path):
                entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                                "pointerSize": 134}
            out.append(entry)
        return out


class State:
    def __init__(self, args):
        self.repos = {}
        for spec in args.repo:
            repo_id, directory = spec.split("=", 1)
            self.repos[repo_id] = Repo(repo_id, directory)
        for repo_id in args.gated:
            self.repos[repo_id].gated = True
        self.cut = {}  # path -> bytes to send before cutting, once
        for spec in args.cut:
            path, n = spec.rsplit(":", 1)
            self.cut[path] = int(n)
        self.corrupt = set(args.corrupt)
        self.token = args.token
        self.log_path = args.log
        self.lock = threading.Lock()
        self.blobs = {}  # sha256 -> (repo, path)
        for repo in self.repos.values():
            for path, data in repo.files.items():
                self.blobs[hashlib.sha256(data).hexdigest()] = (repo, path)

    def log(self, entry):
        if not self.log_path:
            return
        with self.lock, open(self.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, fmt, *args):  # quiet: the --log file has the requests
        pass

    def send_json(self, status, body, headers=None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_error_code(self, status, code, message):
        self.send_json(status, {"error": message},
                       {"X-Error-Code": code, "X-Error-Message": message})

    def authorized(self):
        header = self.headers.get("Authorization", "")
        return header.startswith("Bearer ") and header[7:] == self.state.token

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.state.log({"path": path, "query": query, "range": self.headers.get("Range"),
                        "authorization": self.headers.get("Authorization")})
        parts = path.strip("/").split("/")
        try:
            if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
                return self.model_info(parts[2] + "/" + parts[3], "/".join(parts[5:]))
            if parts[:3] == ["api", "v1", "models"] and len(parts) >= 6 and parts[5] == "repo":
                return self.modelscope(parts[3] + "/" + parts[4], parts[6:], query)
            if parts[0] == "cdn" and len(parts) == 2:
                entry = self.state.blobs.get(parts[1])
                if entry is None:
                    return self.send_error_code(404, "EntryNotFound", "no such blob")
                return self.send_file(entry[0], entry[1])
            if len(parts) >= 5 and parts[2] == "resolve":
                return self.resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]))
        except (BrokenPipeError, ConnectionResetError):
            return
        self.send_error_code(404, "EntryNotFound", "unknown path " + path)

    def find_repo(self, repo_id):
        repo = self.state.repos.get(repo_id)
        if repo is None:
            # As the Hub: 401 without a token, so a private repo is not revealed; 404 with one.
            status = 404 if self.headers.get("Authorization") else 401
            self.send_error_code(status, "RepositoryNotFound", "Repository not found")
        return repo

    def check_revision(self, repo, revision):
        if revision in ("main", "master", repo.commit):
            return True
        self.send_error_code(404, "RevisionNotFound", "Invalid rev id: " + revision)
        return False

    def model_info(self, repo_id, revision):
        repo = self.find_repo(repo_id)
        if repo is None or not self.check_revision(repo, revision):
            return
        self.send_json(200, {"id": repo_id, "sha": repo.commit,
                             "gated": "manual" if repo.gated else False,
                             "siblings": repo.siblings()})

    def resolve(self, repo_id, revision, path):
        repo = self.find_repo(repo_id)
        if repo is None or not self.check_revision(repo, revision):
            return
        if repo.gated and not self.authorized():
            return self.send_error_code(401, "GatedRepo", "Access to this model is restricted")
        if path not in repo.files:
            return self.send_error_code(404, "EntryNotFound", "Entry not found")
        data = repo.files[path]
        if repo.is_lfs(path):
            sha = hashlib.sha256(data).hexdigest()
            self.send_response(302)
            self.send_header("Location", "/cdn/" + sha)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("X-Linked-Etag", '"%s"' % sha)
            self.send_header("X-Linked-Size", str(len(data)))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_file(repo, path, {"X-Repo-Commit": repo.commit,
                                    "ETag": '"%s"' % git_blob_id(data)})

    def modelscope(self, repo_id, rest, query):
        repo = self.find_repo(repo_id)
        if repo is None or not self.check_revision(repo, query.get("Revision", "master")):
            return
        if rest == ["files"]:
            files = [{"Path": p, "Name": p.rsplit("/", 1)[-1], "Type": "blob", "Size": len(d),
                      "Sha256": hashlib.sha256(d).hexdigest()}
                     for p, d in sorted(repo.files.items())]
            return self.send_json(200, {"Code": 200, "Data": {"Files": files}})
        path = query.get("FilePath", "")
        if path not in repo.files:
            return self.send_error_code(404, "EntryNotFound", "Entry not found")
        self.send_file(repo, path)

    def send_file(self, repo, path, headers=None):
        data = repo.files[path]
        if path in self.state.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start, end = 0, len(data)
        status = 200
        spec = self.headers.get("Range")
        if spec:
            first, _, last = spec.replace("bytes=", "").partition("-")
            start = int(first)
            if last:
                end = int(last) + 1
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % len(data))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        body = data[start:end]
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        with self.state.lock:
            cut = self.state.cut.pop(path, None)
        if cut is not None and cut < len(body):
            # The connection drops mid-file: what a client must resume from.
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(body)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--log", default="")
    parser.add_argument("--repo", action="append", default=[])
    parser.add_argument("--gated", action="append", default=[])
    parser.add_argument("--cut", action="append", default=[])
    parser.add_argument("--corrupt", action="append", default=[])
    parser.add_argument("--token", default="hf_test_token")
    args = parser.parse_args()
    Handler.state = State(args)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)  # the test waits for the whole number
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
