"""Charts drawn on the server: a Vega-Lite spec (Altair's ``to_dict``, its data as frames under
``datasets``) rendered by vl-convert into one inline ``<svg>``, each point's, rule's and cell's
values its hover text (a ``<title>``) and each point's ``href`` a link, so that a page loads
no charting script.

Measured on django-asv's store (2-core machine, first loads in a new browser each, medians of
5): streamlit's Vega chart element took 0.15-0.2 s more a page than the same charts as SVG on
an idle machine, 0.4 s at load 3-4 (the Overview's four sparklines are four Vega views); a
bare streamlit app takes 1.0 s here, and one with a 200-point Vega chart 0.33 s more.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import streamlit as st

# the element every chart is drawn in (the bench and the browser tests find charts by it)
CLASS = "rb-chart"
# a chart's width in its spec's pixels where the spec names none; the drawing scales to its
# column, never wider than this
WIDTH = 900
# a value in hover text (and on an axis with no format of its own): 4 digits, no trailing zeros
NUMBERS = ".4~g"
# the marks whose items are one datum each: their values become their hover text (a line's or
# an area's one shape carries only its first point's)
HOVERED = ("point", "rule mark", "rect mark")


def show(spec: dict, where=None) -> None:
    """Draw ``spec`` into ``where`` (a streamlit container; default the page)."""
    where = where or st
    try:
        drawn = svg(spec_json(spec))
    except ValueError as e:  # vl-convert's: "... conversion failed:", then vega's own error
        why = [*str(e).splitlines(), ""][1] or str(e)
        where.error(f"{spec.get('title', 'A chart')}: not drawn ({why.strip()})")
        return
    where.markdown(f'<div class="{CLASS}">{drawn}</div>', unsafe_allow_html=True)


def spec_json(spec: dict) -> str:
    """``spec`` as JSON, its ``datasets`` frames as rows (times in ISO 8601, missing as null)."""
    datasets = {name: json.loads(df.to_json(orient="records", date_format="iso"))
                if isinstance(df, pd.DataFrame) else df
                for name, df in spec.get("datasets", {}).items()}  # fmt: skip
    config = {"numberFormat": NUMBERS, **spec.get("config", {})}
    return json.dumps({"width": WIDTH, **spec, "datasets": datasets, "config": config},
                      default=str)  # fmt: skip


# kept per spec: vl-convert takes 60-70 ms a chart of 100 points here (0.5 s more for the
# first of a process, its JavaScript engine starting)
@st.cache_resource(max_entries=256, show_spinner=False)
def svg(spec: str) -> str:
    """The SVG of the Vega-Lite ``spec`` (JSON): as wide as its column up to its own width,
    hover text on every item of ``HOVERED``, links opened in a new tab."""
    import vl_convert  # its engine, loaded once a page draws a chart

    out = vl_convert.vegalite_to_svg(json.loads(spec))
    out = SIZE.sub(r'<svg \1width="100%" style="max-width:\2px;height:auto"', out, count=1)
    out = out.replace("<a xlink:href=", '<a target="_blank" rel="noopener" xlink:href=')
    return ITEM.sub(hover, out)


SIZE = re.compile(r'^<svg ([^>]*?)width="([\d.]+)" height="[\d.]+"')
# an item of a mark of HOVERED, with no children: vl-convert writes its aria-label (its values,
# "field: value; ...", escaped) before its aria-roledescription (the mark)
ITEM = re.compile(r'<(\w+)( [^>]*?aria-label="([^"]*)"[^>]*?aria-roledescription="(?:'
                  + "|".join(HOVERED) + r')"[^>]*?)/>')  # fmt: skip


def hover(m: re.Match) -> str:
    """An item of ``ITEM`` with its values as its ``<title>`` (a browser shows it on hover):
    "commit: 897f38fabea5; commit time: ...", as vega wrote them (a value may hold "; "). The
    title is its accessible name too, so its ``aria-label``, the same text again, goes: a
    quarter of the Series page's 209 KB SVG, which streamlit's markdown parses in the browser
    (a 200 KB SVG took 0.15 s of a bare app's first load)."""
    attributes = m[2].replace(f' aria-label="{m[3]}"', "", 1)
    return f"<{m[1]}{attributes}><title>{m[3]}</title></{m[1]}>"
