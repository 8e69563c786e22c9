"""The Python peer of `vramtop open FILE --summary` in scripts/compare-peers.py.

Does what PyTorch's `torch/cuda/_memory_viz.py segsum FILE` does, written here
from reading it (nothing is copied): load the pickle with the C unpickler,
here restricted so that it refuses every global (a snapshot is plain data),
then per segment, in order of (total size, bytes of active_allocated blocks):

* allocated = Σ requested_size of active_allocated blocks;
* internal free = Σ (size - requested_size) of active_allocated blocks;
* external free = Σ size of every other block;
* a line for each segment of at least one 20 MiB page, with one character a
  page: the letter of the only allocation on it, ' ' for none, or a digit
  (tenths of the page allocated; '*' when full) for several;

then the totals. Standard library only; `--json` prints the totals as JSON
(the comparison script checks them against vramtop's).
"""

import io
import json
import pickle
import sys

PAGE = 20 << 20


class PlainData(pickle.Unpickler):
    """The C unpickler, refusing every global: no code from the file runs."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def human(n):
    value = float(n)
    for unit in ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"):
        if abs(value) < 1024.0:
            return f"{value:3.1f}{unit}B"
        value /= 1024.0
    return f"{value:.1f}YiB"


def free_text(external, internal):
    total = external + internal
    if total == 0:
        return human(0)
    return f"{human(total)} ({internal / total * 100:.1f}% internal)"


def requested(block):
    # Old snapshots keep the request in the block's history.
    history = block.get("history")
    if history:
        return history[-1].get("real_size", block["size"])
    return block.get("requested_size", block["size"])


def page_line(segment, ranges):
    pages = (segment["total_size"] + PAGE - 1) // PAGE
    marks = [" "] * pages
    filled = [0.0] * pages
    for index, (start, size) in enumerate(ranges):
        end = start + size
        letter = chr(ord("a") + index % 26)
        for page in range(start // PAGE, (end - 1) // PAGE + 1 if size else start // PAGE):
            lo = max(start, page * PAGE)
            hi = min(end, (page + 1) * PAGE)
            filled[page] += (hi - lo) / PAGE
            if marks[page] == " ":
                marks[page] = letter
            else:
                marks[page] = "0123456789*"[min(int(filled[page] * 10), 10)]
    return "".join(marks)


def segsum(data):
    segments = data["segments"] if isinstance(data, dict) else data

    def active(segment):
        return sum(b["size"] for b in segment["blocks"] if b["state"] == "active_allocated")

    out = io.StringIO()
    out.write(f"Summary of segments >= {human(PAGE)} in size\n")
    reserved = allocated = external = internal = 0
    for segment in sorted(segments, key=lambda s: (s["total_size"], active(s))):
        reserved += segment["total_size"]
        seg_allocated = seg_external = seg_internal = 0
        ranges = []
        offset = 0
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                asked = requested(block)
                ranges.append((offset, asked))
                seg_allocated += asked
                seg_internal += block["size"] - asked
            else:
                seg_external += block["size"]
            offset += block["size"]
        allocated += seg_allocated
        external += seg_external
        internal += seg_internal
        if segment["total_size"] >= PAGE:
            stream = f" stream_{segment['stream']}" if segment.get("stream", 0) else ""
            out.write(
                f"[{page_line(segment, ranges)}] {human(segment['total_size'])} allocated, "
                f"{free_text(seg_external, seg_internal)} free{stream}\n"
            )
    out.write(f"segments: {len(segments)}\n")
    out.write(f"total_reserved: {human(reserved)}\n")
    out.write(f"total_allocated: {human(allocated)}\n")
    out.write(f"total_free: {free_text(external, internal)}\n")
    totals = {
        "segments": len(segments),
        "total_reserved": reserved,
        "total_allocated": allocated,
        "total_free": external + internal,
    }
    return out.getvalue(), totals


def main(argv):
    as_json = "--json" in argv
    paths = [a for a in argv if a != "--json"]
    if len(paths) != 1:
        sys.stderr.write("usage: segsum-peer.py [--json] FILE\n")
        return 2
    with open(paths[0], "rb") as f:
        data = PlainData(f).load()
    text, totals = segsum(data)
    sys.stdout.write(json.dumps(totals) + "\n" if as_json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
