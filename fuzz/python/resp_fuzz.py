"""A fuzz loop for the RESP parser (`inswitch.hare.resp.Parser`), without atheris: valid
pipelines of commands (as redis-py and redis-benchmark send them, and inline commands)
are mutated — bytes flipped, inserted, deleted, chunks repeated, lengths rewritten — and
fed in random pieces. The parser must only ever return commands or raise `RespError`,
consume every byte it reports, and stay within its buffering limits; an unmutated
pipeline must come back exactly, whatever the pieces. Any other outcome prints the
input (hex) and exits 1.

    python fuzz/python/resp_fuzz.py [SECONDS] [SEED]
"""

from __future__ import annotations

import random
import sys
import time
import traceback

from inswitch.hare import resp


def valid(rng: random.Random) -> tuple[bytes, list[list[bytes]]]:
    cmds, out = [], b""
    for _ in range(rng.randint(1, 12)):
        args = [rng.choice([b"GET", b"SET", b"DEL", b"MGET", b"PING", b"EXISTS", b"HELLO"])]
        args += [bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 3, 16, 70]))) if rng.random() < 0.7 else b"key%d" % rng.randrange(1000)
                 for _ in range(rng.randint(0, 4))]
        if rng.random() < 0.15 and all(a.isalnum() for a in args):
            out += b" ".join(args) + b"\r\n"  # inline
        else:
            out += resp.encode_command(args)
        cmds.append(args)
    return out, cmds


def mutate(rng: random.Random, b: bytes) -> bytes:
    x = bytearray(b)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(6)
        i = rng.randrange(len(x) + 1)
        if op == 0 and x:
            x[min(i, len(x) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            x[i:i] = bytes([rng.choice(b"*$\r\n-0123456789: ")])
        elif op == 2 and x:
            del x[i : i + rng.randint(1, 8)]
        elif op == 3:
            j = rng.randrange(len(x) + 1)
            x[i:i] = x[min(i, j) : max(i, j)][:64]
        elif op == 4:
            x[i:i] = rng.choice([b"*99999999\r\n", b"$-5\r\n", b"$1048577\r\n", b"*-1\r\n", b"*1\r\n$3\r\nGE", b"\r\n\r\n"])
        else:
            x = x[:i]
    return bytes(x)


def run_one(data: bytes, rng: random.Random) -> list[list[bytes]]:
    p, got, at = resp.Parser(), [], 0
    while at < len(data):
        n = rng.choice([1, 2, 7, 64, 4096])
        p.feed(data[at : at + n])
        at += n
        while True:
            c = p.command()
            if c is None:
                break
            assert isinstance(c, list) and c and all(isinstance(a, bytes) for a in c), c
            got.append(c)
        assert len(p.buf) - p.pos <= resp.MAX_BULK + resp.MAX_INLINE + 64, "buffering without bound"
    return got


def main(argv: list[str]) -> int:
    secs = float(argv[0]) if argv else 10.0
    rng = random.Random(int(argv[1]) if len(argv) > 1 else time.time_ns())
    end = time.monotonic() + secs
    n = refused = 0
    while time.monotonic() < end:
        data, cmds = valid(rng)
        assert run_one(data, rng) == cmds, data.hex()
        m = mutate(rng, data)
        try:
            run_one(m, rng)
        except resp.RespError:
            refused += 1
        except Exception:
            print(f"resp_fuzz: crash on input {m.hex()}", file=sys.stderr)
            traceback.print_exc()
            return 1
        n += 1
    print(f"resp_fuzz: {n} mutated pipelines in {secs:g}s, {refused} refused, no crash")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
