"""The dashboard's history of the last hour and its charts, drawn on the
server as inline SVG (no script, no library).

History samples the queues every few seconds (claim.metrics(), or
claim.queue_stats for a role that may not call it) and keeps the last hour
in memory: a dashboard that was just started shows what it has sampled since.
"""
from __future__ import annotations

import collections
import html
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Tuple

import psycopg

WINDOW = 3600.0          # seconds of history kept and drawn
MAX_POINTS = 360         # points per series; longer series are averaged down
GAUGES = ("ready", "scheduled", "in_flight", "dead_items")
COUNTERS = ("enqueued", "claimed", "completed", "failed", "dead", "expired", "cancelled")
DEPTH_SERIES = (("ready", "ready", "#1f77b4"), ("in_flight", "in flight", "#2ca02c"),
                ("scheduled", "scheduled", "#9467bd"), ("dead_items", "dead", "#d62728"))
RATE_SERIES = (("enqueued", "enqueued/s", "#1f77b4"), ("completed", "completed/s", "#2ca02c"),
               ("failed", "failed/s", "#d62728"))

Sample = Tuple[float, Dict[str, Dict[str, Optional[int]]]]   # (unix time, {queue: {column: value}})


class History(threading.Thread):
    """Samples every `every` seconds on its own connection; keeps an hour."""

    def __init__(self, connect: Callable[[], "psycopg.Connection[Any]"], every: float) -> None:
        super().__init__(daemon=True, name="pg_claim-dashboard-history")
        self.connect, self.every = connect, every
        self.lock = threading.Lock()
        self.samples: Deque[Sample] = collections.deque()
        self.started = time.time()
        self.error: Optional[str] = None        # why the last sample failed, if it did
        self.counters = True                     # False: the role reads queue_stats only
        self.stop = threading.Event()

    def read(self) -> Dict[str, Dict[str, Optional[int]]]:
        with self.connect() as conn:
            try:
                cur = conn.execute("SELECT queue, " + ", ".join(GAUGES + COUNTERS) + " FROM claim.metrics()")
                self.counters = True
                return {r[0]: dict(zip(GAUGES + COUNTERS, r[1:])) for r in cur.fetchall()}
            except psycopg.errors.InsufficientPrivilege:
                cur = conn.execute("SELECT queue, ready, scheduled, claimed, dead FROM claim.queue_stats")
                self.counters = False
                return {r[0]: dict(zip(GAUGES, r[1:])) for r in cur.fetchall()}

    def sample(self) -> None:
        try:
            data = self.read()
        except psycopg.Error as exc:
            self.error = str(exc).strip() or type(exc).__name__
            return
        now = time.time()
        with self.lock:
            self.error = None
            self.samples.append((now, data))
            while self.samples and self.samples[0][0] < now - WINDOW - 2 * self.every:
                self.samples.popleft()

    def snapshot(self) -> List[Sample]:
        with self.lock:
            return list(self.samples)

    def rates(self) -> Dict[str, Dict[str, Optional[float]]]:
        """Per queue, the rate of each counter between the last two samples."""
        s = self.snapshot()[-2:]
        if len(s) < 2:
            return {}
        return {q: rate_between(s[0], s[1], q) for q in s[1][1]}

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(self.every)


def rate_between(a: Sample, b: Sample, queue: Optional[str]) -> Dict[str, Optional[float]]:
    """Counter rates from sample a to b for one queue, or summed over the
    queues present in both (queue None). None where unknown or where a
    counter went back (the server restarted)."""
    dt = b[0] - a[0]
    out: Dict[str, Optional[float]] = {}
    queues = [queue] if queue is not None else [q for q in b[1] if q in a[1]]
    for c in COUNTERS:
        total: Optional[float] = 0.0
        for q in queues:
            pa, pb = a[1].get(q), b[1].get(q)
            if dt <= 0 or pa is None or pb is None or pa.get(c) is None or pb.get(c) is None or pb[c] < pa[c]:
                total = None
                break
            total += (pb[c] - pa[c]) / dt
        out[c] = total
    return out


def gauge_of(sample: Sample, queue: Optional[str], col: str) -> Optional[float]:
    rows = [sample[1][queue]] if queue is not None and queue in sample[1] else \
        ([] if queue is not None else list(sample[1].values()))
    if queue is not None and not rows:
        return None
    vals = [r.get(col) for r in rows]
    if any(v is None for v in vals):
        return None
    return float(sum(vals))  # type: ignore[arg-type]


def thin(points: List[Tuple[float, float]], limit: int = MAX_POINTS) -> List[Tuple[float, float]]:
    """At most `limit` points: consecutive ones averaged (time and value)."""
    if len(points) <= limit:
        return points
    step = -(-len(points) // limit)
    out = []
    for i in range(0, len(points), step):
        chunk = points[i:i + step]
        out.append((sum(p[0] for p in chunk) / len(chunk), sum(p[1] for p in chunk) / len(chunk)))
    return out


def depth_series(samples: Sequence[Sample], queue: Optional[str]) -> List[Tuple[str, str, str, List[Tuple[float, float]]]]:
    out = []
    for col, label, color in DEPTH_SERIES:
        pts = [(s[0], v) for s in samples for v in [gauge_of(s, queue, col)] if v is not None]
        out.append((col, label, color, thin(pts)))
    return out


def rate_series(samples: Sequence[Sample], queue: Optional[str]) -> List[Tuple[str, str, str, List[Tuple[float, float]]]]:
    pairs = [(a, b, rate_between(a, b, queue)) for a, b in zip(samples, samples[1:])]
    out = []
    for col, label, color in RATE_SERIES:
        pts = [(b[0], r[col]) for a, b, r in pairs if r[col] is not None]
        out.append((col, label, color, thin(pts)))  # type: ignore[arg-type]
    return out


def nice_max(v: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is >= v (> 0)."""
    if v <= 0:
        return 1.0
    p = 1.0
    while p * 10 <= v:
        p *= 10
    while p > v:
        p /= 10
    for m in (1, 2, 2.5, 5, 10):
        if m * p >= v:
            return m * p
    return 10 * p


def fmt(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    text = f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 1000 else f"{v:.0f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def span_of(samples: Sequence[Sample], now: float) -> float:
    """The time a chart shows: the last hour, or since the first sample when
    the dashboard has run for less (at least a minute)."""
    if not samples:
        return WINDOW
    return min(WINDOW, max(60.0, now - samples[0][0]))


def tick_step(span: float) -> float:
    for step in (10, 30, 60, 120, 300, 600):
        if span / step <= 6:
            return float(step)
    return 900.0


def ago(seconds: float) -> str:
    return f"-{seconds / 60:g} min" if seconds >= 60 else f"-{seconds:g} s"


def svg_chart(cid: str, title: str, series: Iterable[Tuple[str, str, str, List[Tuple[float, float]]]],
              now: float, span: float, empty_note: str) -> str:
    """One chart of the `span` seconds before now: a line per series, its
    last value in the legend, and data-* attributes a test can read."""
    series = list(series)
    W, H, ML, MR, MT, MB = 560, 190, 46, 12, 10, 24
    pw, ph = W - ML - MR, H - MT - MB
    t0 = now - span
    ymax = nice_max(max([v for _, _, _, pts in series for _, v in pts] or [0]))
    x = lambda t: ML + pw * min(1.0, max(0.0, (t - t0) / span))  # noqa: E731
    y = lambda v: MT + ph * (1 - min(1.0, max(0.0, v / ymax)))     # noqa: E731
    parts = [f'<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
             f'aria-label="{html.escape(title)}" data-ymax="{fmt(ymax)}" data-span="{span:.0f}">']
    for i in range(5):   # horizontal grid and y labels
        v = ymax * i / 4
        parts.append(f'<line x1="{ML}" x2="{W - MR}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e3e3e3"/>'
                     f'<text x="{ML - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10" fill="#666">{fmt(v)}</text>')
    step = tick_step(span)
    ticks = [0.0] + [k * step for k in range(1, int(span // step) + 1) if k * step < span - step / 3] + [span]
    for back in ticks:   # x labels: time before now
        xx = x(now - back)
        label = "now" if back == 0 else ago(back)
        anchor = "end" if back == 0 else "start" if back == span else "middle"
        parts.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{MT}" y2="{MT + ph}" stroke="#f0f0f0"/>'
                     f'<text x="{xx:.1f}" y="{H - 6}" text-anchor="{anchor}" font-size="10" fill="#666">{label}</text>')
    parts.append(f'<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" stroke="#bbb"/>')
    legend = []
    for key, label, color, pts in series:
        last = fmt(pts[-1][1]) if pts else ""
        if len(pts) == 1:
            parts.append(f'<circle cx="{x(pts[0][0]):.1f}" cy="{y(pts[0][1]):.1f}" r="2.5" fill="{color}"/>')
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        parts.append(f'<polyline data-series="{key}" data-points="{len(pts)}" data-last="{last}" '
                     f'points="{coords}" fill="none" stroke="{color}" stroke-width="1.6"/>')
        legend.append(f'<span class="key" data-series="{key}"><svg width="12" height="12">'
                      f'<rect width="12" height="12" fill="{color}"/></svg> {html.escape(label)}'
                      f'{f" <b>{last}</b>" if last else ""}</span>')
    parts.append("</svg>")
    note = "" if any(pts for *_, pts in series) else f'<p class="note">{html.escape(empty_note)}</p>'
    return (f'<figure class="chart" id="{cid}"><figcaption>{html.escape(title)}</figcaption>'
            + "".join(parts) + f'<div class="legend">{"".join(legend)}</div>{note}</figure>')
