#!/usr/bin/env python3
"""The encrypted weight format of src/crypto/encrypted_file.h, written again from its comment
with Python's `cryptography` (Debian: python3-cryptography), so that the C++ tests check the
format and not only that the C++ code agrees with itself.

  encrypted_file_reference.py decrypt KEY_HEX IN OUT
  encrypted_file_reference.py encrypt KEY_HEX CHUNK_BYTES IN OUT
Exit status 1 with a message on stderr when a file does not decrypt.
"""
import os
import struct
import sys

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"PGDAENC1"
CIPHER = b"AES-256-GCM".ljust(16, b"\0")
HEADER_BYTES = 64
TAG_BYTES = 16
HEADER_INDEX = 2**64 - 1


def nonce_for(file_nonce, index):
    tail = int.from_bytes(file_nonce[4:], "little") ^ index
    return file_nonce[:4] + tail.to_bytes(8, "little")


def num_chunks(size, chunk):
    return max(1, -(-size // chunk))


def encrypt(key, chunk, data):
    nonce = os.urandom(12)
    header = MAGIC + CIPHER + struct.pack("<IIQ", chunk, 0, len(data)) + nonce + bytes(12)
    gcm = AESGCM(key)
    out = [header, gcm.encrypt(nonce_for(nonce, HEADER_INDEX), b"", header)]
    for i in range(num_chunks(len(data), chunk)):
        out.append(gcm.encrypt(nonce_for(nonce, i), data[i * chunk:(i + 1) * chunk], header))
    return b"".join(out)


def decrypt(key, blob):
    header = blob[:HEADER_BYTES]
    if header[:8] != MAGIC or header[8:24] != CIPHER:
        raise ValueError("not an AES-256-GCM PGDAENC1 file")
    chunk, reserved, size = struct.unpack("<IIQ", header[24:40])
    nonce = header[40:52]
    gcm = AESGCM(key)
    gcm.decrypt(nonce_for(nonce, HEADER_INDEX), blob[HEADER_BYTES:HEADER_BYTES + TAG_BYTES], header)
    pos = HEADER_BYTES + TAG_BYTES
    out = []
    for i in range(num_chunks(size, chunk)):
        n = min(chunk, size - i * chunk)
        out.append(gcm.decrypt(nonce_for(nonce, i), blob[pos:pos + n + TAG_BYTES], header))
        pos += n + TAG_BYTES
    if pos != len(blob):
        raise ValueError(f"{len(blob) - pos} bytes past the last chunk")
    return b"".join(out)


def main(argv):
    key = bytes.fromhex(argv[2])
    if argv[1] == "decrypt":
        with open(argv[3], "rb") as f:
            blob = f.read()
        try:
            data = decrypt(key, blob)
        except (InvalidTag, ValueError) as e:
            print(f"{argv[3]}: {type(e).__name__} {e}", file=sys.stderr)
            return 1
        with open(argv[4], "wb") as f:
            f.write(data)
    elif argv[1] == "encrypt":
        with open(argv[4], "rb") as f:
            data = f.read()
        with open(argv[5], "wb") as f:
            f.write(encrypt(key, int(argv[3]), data))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
