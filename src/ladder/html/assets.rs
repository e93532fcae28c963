//! The page's furniture: its style sheet, its legend and its small script (hover, click
//! or tab to an arrow fills the details panel from the arrow's title; `#frame-N` opens on
//! a packet). Text only, kept apart from the drawing code in `mod.rs`.

/// Colours: arrows are saturated (request blue, response green, NAK red, RNR orange,
/// CNP purple, CM teal); everything else is grey or black.
pub(super) const CSS: &str = r#"
body{margin:0;font:14px/1.35 system-ui,sans-serif;color:#222;background:#fff;
 display:grid;grid-template-columns:1120px 270px;align-items:start}
main{padding:0 10px 20px 10px;min-width:0}
h1{font-size:20px;margin:10px 0 4px 0}
h2{font-size:15px;margin:14px 0 4px 0;font-weight:600}
.summary{margin:0 0 6px 0;color:#444}
.js .nojs,.jsonly{display:none}
.js .jsonly{display:inline}
svg.ladder{display:block;font:12px ui-monospace,monospace}
svg text{fill:#222}
.flowname{font-weight:bold;fill:#555}
.colhead rect{fill:#f3f3f3;stroke:#444;stroke-width:1}
.colhead text{text-anchor:middle}
.colhead .role{font-weight:bold}
.life{stroke:#aaa;stroke-width:1}
.pkt{color:#0b47c4;cursor:pointer;outline:none}
.pkt.resp{color:#0a7a2f}
.pkt.nak{color:#c0162c}
.pkt.rnr{color:#c25e00}
.pkt.cnp{color:#7a28aa}
.pkt.cm{color:#06707a}
.pkt .arrow{stroke:currentColor;stroke-width:2}
.pkt .head{fill:currentColor}
.pkt .hit{stroke:transparent;stroke-width:14}
.pkt.retx .arrow{stroke-dasharray:6 4}
.pkt .cross{stroke:#c0162c;stroke-width:2.5;fill:none}
.pkt .lbl{text-anchor:middle;fill:currentColor}
.pkt.dropped .lbl{text-decoration:line-through}
.pkt .frame,.pkt .time{fill:#666;font-size:11px}
.note{fill:#333;font-size:11px}
.pkt.retx .note{fill:#8a4a00}
.pkt:hover .arrow,.pkt:focus .arrow,.pkt.sel .arrow{stroke-width:3.5}
.pkt:hover .lbl,.pkt:focus .lbl,.pkt.sel .lbl{font-weight:bold}
.covers{stroke:#777;stroke-width:1.2;fill:none}
.gap line{stroke:#888;stroke-width:2;stroke-dasharray:2 3}
.gap .gaplbl{fill:#666;font-style:italic}
.wait rect{fill:#e08a1e;opacity:.75}
.wait.timeout rect{fill:#a33;opacity:.6}
aside{position:sticky;top:0;padding:10px;font-size:12px;border-left:1px solid #ddd;
 max-height:100vh;overflow:auto;box-sizing:border-box}
aside h2{font-size:14px;margin:6px 0}
.legend{list-style:none;padding:0;margin:0}
.legend li{display:flex;align-items:center;gap:6px;margin:2px 0}
.legend svg{flex:none}
#details table{border-collapse:collapse;width:100%;font:11px ui-monospace,monospace}
#details td{border-top:1px solid #eee;padding:1px 3px;vertical-align:top;word-break:break-all}
#details td:first-child{color:#555}
#details .dlabel{font:bold 12px ui-monospace,monospace;word-break:break-all}
"#;

/// The legend: one small sample per kind of mark.
pub(super) const LEGEND: &str = "<section class=\"legendbox\"><h2>Legend</h2><ul class=\"legend\">\
<li><svg width=\"46\" height=\"10\"><line x1=\"2\" y1=\"5\" x2=\"44\" y2=\"5\" stroke=\"#0b47c4\" stroke-width=\"2\"/></svg>request</li>\
<li><svg width=\"46\" height=\"10\"><line x1=\"2\" y1=\"5\" x2=\"44\" y2=\"5\" stroke=\"#0a7a2f\" stroke-width=\"2\"/></svg>ACK, READ/atomic response</li>\
<li><svg width=\"46\" height=\"10\"><line x1=\"2\" y1=\"5\" x2=\"44\" y2=\"5\" stroke=\"#c0162c\" stroke-width=\"2\"/></svg>NAK</li>\
<li><svg width=\"46\" height=\"10\"><line x1=\"2\" y1=\"5\" x2=\"44\" y2=\"5\" stroke=\"#c25e00\" stroke-width=\"2\"/></svg>RNR NAK</li>\
<li><svg width=\"46\" height=\"10\"><line x1=\"2\" y1=\"5\" x2=\"44\" y2=\"5\" stroke=\"#7a28aa\" stroke-width=\"2\"/></svg>CNP</li>\
<li><svg width=\"46\" height=\"10\"><line x1=\"2\" y1=\"5\" x2=\"44\" y2=\"5\" stroke=\"#06707a\" stroke-width=\"2\"/></svg>CM message</li>\
<li><svg width=\"46\" height=\"10\"><line x1=\"2\" y1=\"5\" x2=\"44\" y2=\"5\" stroke=\"#0b47c4\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/></svg>retransmission (\u{21bb})</li>\
<li><svg width=\"46\" height=\"12\"><line x1=\"2\" y1=\"6\" x2=\"34\" y2=\"6\" stroke=\"#0b47c4\" stroke-width=\"2\"/><path d=\"M34,1l10,10m0,-10l-10,10\" stroke=\"#c0162c\" stroke-width=\"2.5\"/></svg>dropped on the wire</li>\
<li><svg width=\"46\" height=\"10\"><line x1=\"2\" y1=\"5\" x2=\"30\" y2=\"5\" stroke=\"#888\" stroke-width=\"2\" stroke-dasharray=\"2 3\"/></svg>PSNs never seen</li>\
<li><svg width=\"46\" height=\"20\"><path d=\"M30,2H22V18H30M22,10H30\" stroke=\"#777\" fill=\"none\"/></svg>requests an ACK covers</li>\
<li><svg width=\"46\" height=\"20\"><rect x=\"19\" y=\"1\" width=\"8\" height=\"18\" fill=\"#e08a1e\"/></svg>RNR wait</li>\
<li><svg width=\"46\" height=\"20\"><rect x=\"19\" y=\"1\" width=\"8\" height=\"18\" fill=\"#a33\" opacity=\".6\"/></svg>ACK timeout</li>\
</ul></section>\n";

/// The details panel: built from the arrow's `<title>` (its first lines say what the
/// packet is, the `name = value` lines are its fields), with textContent only.
pub(super) const JS: &str = r#"(function () {
  var root = document.documentElement;
  root.className = (root.className ? root.className + ' ' : '') + 'js';
  var panel = document.getElementById('details');
  var pinned = null;
  function cell(tr, text) {
    var td = document.createElement('td');
    td.textContent = text;
    tr.appendChild(td);
  }
  function show(g) {
    var t = g.querySelector('title');
    if (!t || !panel) return;
    var lines = t.textContent.split('\n');
    while (panel.firstChild) panel.removeChild(panel.firstChild);
    var h = document.createElement('h2');
    h.textContent = 'Packet #' + g.getAttribute('data-frame');
    panel.appendChild(h);
    var table = document.createElement('table');
    lines.forEach(function (line, i) {
      var m = /^([A-Za-z0-9_.]+) = (.*)$/.exec(line);
      if (m) {
        var tr = document.createElement('tr');
        cell(tr, m[1]);
        cell(tr, m[2]);
        table.appendChild(tr);
      } else {
        var p = document.createElement('p');
        p.textContent = line;
        if (i === 1) p.className = 'dlabel';
        panel.appendChild(p);
      }
    });
    panel.appendChild(table);
  }
  function pkt(e) {
    return e.target && e.target.closest ? e.target.closest('g.pkt') : null;
  }
  document.addEventListener('mouseover', function (e) {
    var g = pkt(e);
    if (g && !pinned) show(g);
  });
  document.addEventListener('focusin', function (e) {
    var g = pkt(e);
    if (g && !pinned) show(g);
  });
  function pin(g) {
    if (pinned) pinned.classList.remove('sel');
    pinned = g;
    g.classList.add('sel');
    show(g);
  }
  document.addEventListener('click', function (e) {
    var g = pkt(e);
    if (!g) return;
    if (pinned === g) {
      g.classList.remove('sel');
      pinned = null;
      return;
    }
    pin(g);
  });
  // page.html#frame-12 opens on frame 12's packet, chosen (a link to one packet).
  function fromHash() {
    var m = /^#frame-([0-9]+)$/.exec(location.hash);
    if (!m) return;
    var g = document.querySelector('g.pkt[data-frame="' + m[1] + '"]');
    if (!g) return;
    pin(g);
    if (g.scrollIntoView) g.scrollIntoView({ block: 'center' });
  }
  window.addEventListener('hashchange', fromHash);
  fromHash();
})();
"#;
