"""A plan as JSON, as a table, as a terminal bar and as an SVG of the memory basin.

The basin is the whole GPU: weights | allowance (activations, CUDA graphs, non-torch) | KV for
one sequence at the requested context | per-sequence state | headroom (what is left of the
budget, more sequences' worth) | reserve above the utilisation limit.
"""

from __future__ import annotations

from html import escape
from typing import Any

from modelswap.planner.memory import Plan

GIB = 1024**3
MIB = 1024**2

# (key, label, terminal glyph, SVG colour)
SEGMENTS = (
    ("weights", "weights", "█", "#4c72b0"),
    ("allowance", "activations/graphs", "▓", "#8172b2"),
    ("kv", "KV", "▒", "#dd8452"),
    ("state", "state", "░", "#c44e52"),
    ("headroom", "headroom", "·", "#55a868"),
    ("reserve", "reserve", " ", "#cccccc"),
)


def _size(value: float | None) -> str:
    if value is None:
        return "-"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value >= GIB:
        return f"{sign}{value / GIB:.2f} GiB"
    if value >= MIB:
        return f"{sign}{value / MIB:.2f} MiB"
    return f"{sign}{value / 1024:.2f} KiB"


def plan_dict(plan: Plan) -> dict[str, Any]:
    """Every figure of the plan; bytes as integers, absent figures left out."""
    inputs = plan.inputs
    out: dict[str, Any] = {
        "model": plan.shape.as_dict(),
        "engine": inputs.engine,
        "context": plan.context,
        "kv_dtype": plan.kv_dtype,
        "tensor_parallel_size": max(1, inputs.tensor_parallel),
        "max_num_seqs": plan.max_num_seqs,
        "weights_bytes": plan.weights_bytes,
        "allowance_bytes": plan.allowance_bytes,
        "allowance_source": plan.allowance_source,
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "state_bytes_per_sequence": plan.state_bytes_per_seq,
        "kv_bytes_at_context": plan.kv_bytes_at_context,
        "verdict": plan.verdict,
    }
    if plan.geometry is not None:
        geo = plan.geometry
        out["vllm_blocks"] = {
            "block_size_tokens": geo.block_size,
            "page_bytes": geo.page_bytes,
            "group_size": geo.group_size,
            "groups": [g.kind for g in geo.groups],
            "block_bytes": geo.block_bytes,
            "blocks_per_request": geo.blocks_per_request(plan.context),
        }
    if inputs.gpu_bytes is not None:
        out["gpu_bytes"] = inputs.gpu_bytes
        out["gpu_source"] = inputs.gpu_source
        out["utilization"] = plan.utilization
    optional = {
        "budget_bytes": plan.budget_bytes,
        "kv_budget_bytes": plan.kv_budget_bytes,
        "max_context": plan.max_context,
        "max_concurrency": plan.max_concurrency,
        "kv_cache_tokens": plan.kv_cache_tokens,
        "mamba_blocks": plan.mamba_blocks,
        "fits": plan.fits,
        "margin_bytes": plan.margin_bytes,
        "utilization_needed": plan.utilization_needed,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    for key in ("problems", "fixes", "notes"):
        if getattr(plan, key):
            out[key] = list(getattr(plan, key))
    if plan.budget_bytes is not None:
        out["basin"] = basin(plan)
    return out


def basin(plan: Plan) -> dict[str, int]:
    """Bytes per segment of the memory basin (the GPU), left to right."""
    gpu = plan.inputs.gpu_bytes or 0
    budget = plan.budget_bytes or 0
    state = plan.state_bytes_per_seq * (plan.max_num_seqs if plan.geometry is None else 1)
    used = plan.weights_bytes + plan.allowance_bytes + plan.kv_bytes_at_context + state
    return {
        "weights": plan.weights_bytes,
        "allowance": plan.allowance_bytes,
        "kv": plan.kv_bytes_at_context,
        "state": state,
        "headroom": budget - used,
        "reserve": gpu - budget,
    }


def terminal_bar(plan: Plan, width: int = 64) -> list[str]:
    """The basin as one line of block characters, a legend, and an overflow marker."""
    parts = basin(plan)
    gpu = max(plan.inputs.gpu_bytes or 1, 1)
    cells = ""
    for key, _label, glyph, _colour in SEGMENTS:
        value = max(parts[key], 0)
        cells += glyph * round(value / gpu * width)
    cells = (cells + " " * width)[:width]
    lines = [f"[{cells}]"]
    if parts["headroom"] < 0:
        lines[0] += f"  over budget by {_size(-parts['headroom'])}"
    legend = "  ".join(
        f"{glyph if glyph.strip() else '_'} {label} {_size(parts[key])}"
        for key, label, glyph, _c in SEGMENTS
    )
    lines.append(legend)
    return lines


def svg(plan: Plan, width: int = 640) -> str:
    """The basin as a standalone SVG (one bar, labelled segments, the verdict)."""
    parts = basin(plan)
    gpu = max(plan.inputs.gpu_bytes or 1, 1)
    x = 0.0
    rects = []
    labels = []
    for key, label, _glyph, colour in SEGMENTS:
        value = max(parts[key], 0)
        w = value / gpu * width
        if w <= 0:
            continue
        title = escape(f"{label}: {_size(parts[key])}")
        rects.append(
            f'<rect x="{x:.1f}" y="30" width="{w:.1f}" height="40" fill="{colour}">'
            f"<title>{title}</title></rect>"
        )
        if w > 60:
            labels.append(
                f'<text x="{x + 4:.1f}" y="55" font-size="11" fill="#fff">{escape(label)}</text>'
            )
        x += w
    budget_x = (plan.budget_bytes or 0) / gpu * width
    verdict = escape(f"{plan.shape.name}: {plan.verdict} at {plan.context} tokens")
    legend = escape(" | ".join(f"{label} {_size(parts[key])}" for key, label, _g, _c in SEGMENTS))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="110" '
        f'viewBox="0 0 {width} 110" font-family="sans-serif">'
        f'<text x="0" y="18" font-size="13">{verdict}</text>'
        f'<rect x="0" y="30" width="{width}" height="40" fill="#eeeeee"/>'
        + "".join(rects)
        + "".join(labels)
        + f'<line x1="{budget_x:.1f}" y1="24" x2="{budget_x:.1f}" y2="76" stroke="#000" '
        f'stroke-dasharray="3,2"><title>utilisation limit</title></line>'
        f'<text x="0" y="92" font-size="10">{legend}</text>'
        f'<text x="0" y="106" font-size="10">GPU {_size(gpu)} × {plan.utilization:g}</text>'
        "</svg>\n"
    )


def table(plan: Plan) -> str:
    """The plan as aligned ``label  value`` lines, then the verdict, fixes and the bar."""
    shape = plan.shape
    inputs = plan.inputs
    rows: list[tuple[str, str]] = [
        ("model", f"{shape.name} ({shape.architecture}, {shape.fmt})"),
        ("layers", _layers(plan)),
        ("engine", f"{inputs.engine}, TP {max(1, inputs.tensor_parallel)}"),
        (
            "context",
            f"{plan.context:,} tokens, KV {plan.kv_dtype}, max_num_seqs {plan.max_num_seqs}",
        ),
    ]
    if inputs.gpu_bytes is not None:
        rows.append(("GPU memory", f"{_size(inputs.gpu_bytes)} ({inputs.gpu_source})"))
        rows.append(("budget", f"{_size(plan.budget_bytes)} (× {plan.utilization:g} utilisation)"))
    rows.append(("weights", f"{_size(plan.weights_bytes)} ({shape.weights.how})"))
    rows.append(("allowance", f"{_size(plan.allowance_bytes)} ({plan.allowance_source})"))
    if plan.kv_budget_bytes is not None:
        rows.append(("KV budget left", _size(plan.kv_budget_bytes)))
    rows.append(
        ("KV per token", f"{_size(plan.kv_bytes_per_token)} ({plan.kv_bytes_per_token:,.0f} B)")
    )
    if shape.hybrid:
        rows.append(("state per sequence", _size(plan.state_bytes_per_seq)))
    if plan.geometry is not None:
        geo = plan.geometry
        rows.append(
            (
                "vLLM blocks",
                f"{geo.block_size} tokens/block, {_size(geo.block_bytes)} per block "
                f"({len(geo.groups)} groups of {geo.group_size} layers), "
                f"{geo.blocks_per_request(plan.context)} blocks per request",
            )
        )
    rows.append(("KV at context", f"{_size(plan.kv_bytes_at_context)} for one sequence"))
    if plan.max_context is not None:
        rows.append(("max context", f"{plan.max_context:,} tokens (one sequence)"))
    if plan.max_concurrency is not None and plan.geometry is not None:
        rows.append(
            (
                "max concurrency",
                f"{plan.max_concurrency:.2f}x at {plan.context:,} tokens "
                f"(KV cache {plan.kv_cache_tokens:,} tokens)",
            )
        )
    if plan.mamba_blocks is not None:
        rows.append(("Mamba blocks", f"{plan.mamba_blocks} (every running sequence needs one)"))
    if plan.margin_bytes is not None:
        rows.append(("margin", _size(plan.margin_bytes)))
    if plan.utilization_needed is not None:
        rows.append(("utilisation needed", f"{plan.utilization_needed:.4f}"))
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {value}" for label, value in rows]
    lines.append("")
    lines.append(f"verdict: {plan.verdict.upper()}")
    lines.extend(f"  {problem}" for problem in plan.problems)
    lines.extend(f"  fix: {fix}" for fix in plan.fixes)
    lines.extend(f"  note: {note}" for note in plan.notes)
    if plan.budget_bytes is not None:
        lines.append("")
        lines.extend(terminal_bar(plan))
    return "\n".join(lines)


def _layers(plan: Plan) -> str:
    shape = plan.shape
    parts = []
    if shape.full:
        parts.append(
            f"{shape.full.layers} full-attention ({shape.full.kv_heads} KV heads × "
            f"{shape.full.head_dim_k})"
        )
    if shape.sliding:
        parts.append(f"{shape.sliding.layers} sliding-window ({shape.sliding.window} tokens)")
    if shape.linear:
        parts.append(f"{shape.linear.layers} linear-attention (GDN)")
    return f"{shape.layers}: " + ", ".join(parts) if parts else str(shape.layers)
