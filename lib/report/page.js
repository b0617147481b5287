// The nightly page's script: the case drawer, filters, the matrix cells (report_page.cpp embeds it
// at build time; tests/browser drives it in headless Chromium).
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('bitcheck-data').textContent);
  var S = data.strings;
  var KIND = ['invariant', 'control', 'library default'];
  var FAILING = {drift: 1, nondeterministic: 1, inaccurate: 1, error: 1};
  var cases = data.cases.map(function (c, i) {
    // A case at tp > 1 (id ".../tp=P") belongs to the matrix row "op tp=P".
    var tp = Number((/\/tp=(\d+)/.exec(c[0]) || [0, 1])[1]);
    return {i: i, id: c[0], op: S[c[1]], impl: S[c[2]], dtype: S[c[3]], pass: S[c[4]], verdict: S[c[5]],
            kind: KIND[c[6]], M: c[7], shape: S[c[8]], layouts: S[c[9]], reason: c[10], findings: c[11],
            leftOut: c[12], kernels: c[13], tp: tp, row: S[c[1]] + (tp > 1 ? ' tp=' + tp : '')};
  });
  var byId = {};
  cases.forEach(function (c) { byId[c.id] = c; });
  var panel = document.getElementById('cases');
  var filterBox = document.getElementById('filter');
  var openCellButton = null;

  function el(tag, attrs) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) {
      if (k === 'text') node.textContent = attrs[k];
      else if (k === 'cls') node.className = attrs[k];
      else node.setAttribute(k, attrs[k]);
    }
    for (var j = 2; j < arguments.length; j++) {
      var child = arguments[j];
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === 'object' ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function num(v) { return v === null || v === undefined ? '-' : String(v); }
  function failing(c) { return c.kind === 'invariant' && FAILING[c.verdict]; }
  function rank(c) { return failing(c) ? 0 : c.kind === 'invariant' ? 1 : c.kind === 'control' ? 2 : 3; }
  function replayCommand(c) {
    return 'bitcheck repro ' + data.report + " --case '" + c.id.replace(/'/g, "'\\''") + "'";
  }
  function copy(text, button) {
    function done() { button.textContent = 'copied'; setTimeout(function () { button.textContent = 'copy'; }, 1500); }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(done, function () { fallback(); });
    } else fallback();
    function fallback() {
      var area = el('textarea', {}, text);
      document.body.appendChild(area);
      area.select();
      try { document.execCommand('copy'); done(); } catch (e) { button.textContent = 'select and copy'; }
      document.body.removeChild(area);
    }
  }
  function findingTable(c) {
    var table = el('table', {cls: 'finding'});
    var drift = c.findings.filter(function (f) { return f[0] !== 'accuracy'; });
    var accuracy = c.findings.filter(function (f) { return f[0] === 'accuracy'; });
    if (drift.length) {
      table.appendChild(el('tr', {}, el('th', {text: 'check'}), el('th', {text: 'tensor'}),
        el('th', {text: 'layout vs reference'}), el('th', {text: 'max abs'}), el('th', {text: 'max rel'}),
        el('th', {text: 'max ULP'}), el('th', {text: 'mismatches'}), el('th', {text: 'first differing index'}),
        el('th', {text: 'expected (bits)'}), el('th', {text: 'actual (bits)'})));
      drift.forEach(function (f) {
        table.appendChild(el('tr', {cls: 'finding-row'}, el('td', {text: f[0]}), el('td', {text: f[1]}),
          el('td', {text: f[2] + ' vs ' + f[3]}), el('td', {text: num(f[4])}), el('td', {text: num(f[5])}),
          el('td', {text: num(f[6])}), el('td', {text: num(f[7]) + ' of ' + num(f[8])}),
          el('td', {text: 'row ' + num(f[9]) + ', column ' + num(f[10])}),
          el('td', {cls: 'mono expected', text: num(f[11]) + ' (' + f[12] + ')'}),
          el('td', {cls: 'mono actual', text: num(f[13]) + ' (' + f[14] + ')'})));
      });
    }
    accuracy.forEach(function (f) {
      table.appendChild(el('tr', {cls: 'finding-row'}, el('td', {text: 'inaccurate'}), el('td', {text: f[1]}),
        el('td', {colspan: 8, text: 'max abs error ' + num(f[4]) + ', max rel error ' + num(f[5]) + ' (atol ' +
          num(f[2]) + ', rtol ' + num(f[3]) + '); ' + num(f[6]) + ' of ' + num(f[7]) + ' values out of bounds, ' +
          num(f[8]) + ' NaN'})));
    });
    return table;
  }
  // With provenance: the kernels each layout of the findings launched (both sides of a drift).
  function kernelTable(c) {
    var table = el('table', {cls: 'kernels'});
    table.appendChild(el('tr', {}, el('th', {text: 'layout'}), el('th', {text: 'kernel'}),
      el('th', {text: 'grid'}), el('th', {text: 'block'}), el('th', {text: 'shared bytes'}),
      el('th', {text: 'calls'})));
    Object.keys(c.kernels).forEach(function (layout) {
      c.kernels[layout].forEach(function (k) {
        table.appendChild(el('tr', {cls: 'kernel-row'}, el('td', {text: layout}),
          el('td', {cls: 'mono', text: k[0]}), el('td', {text: '(' + k[1].join(',') + ')'}),
          el('td', {text: '(' + k[2].join(',') + ')'}), el('td', {text: num(k[3])}),
          el('td', {text: num(k[4])})));
      });
    });
    return table;
  }
  function detail(c) {
    var box = el('div', {cls: 'case-detail'});
    box.appendChild(el('div', {cls: 'mono', text: c.id}));
    if (c.reason) box.appendChild(el('p', {text: 'reason: ' + c.reason}));
    if (c.findings) box.appendChild(findingTable(c));
    if (c.kernels) {
      box.appendChild(el('p', {cls: 'note', text: 'kernels launched (provenance)'}));
      box.appendChild(kernelTable(c));
    }
    if (c.leftOut) box.appendChild(el('p', {cls: 'note', text: c.leftOut + ' more findings in the report JSON'}));
    var command = replayCommand(c);
    var button = el('button', {type: 'button', cls: 'copy'}, 'copy');
    button.addEventListener('click', function (e) { e.stopPropagation(); copy(command, button); });
    box.appendChild(el('div', {cls: 'repro'}, 'replay:', el('code', {cls: 'replay'}, command), button));
    return box;
  }
  function caseTable(list, limit) {
    var table = el('table', {cls: 'case-table'});
    table.appendChild(el('thead', {}, el('tr', {}, el('th', {text: 'kind'}), el('th', {text: 'impl'}),
      el('th', {text: 'op'}), el('th', {text: 'dtype / pass'}), el('th', {text: 'shape'}), el('th', {text: 'M'}),
      el('th', {text: 'tp'}), el('th', {text: 'verdict'}), el('th', {text: 'layouts'}))));
    var body = el('tbody');
    list.slice(0, limit).forEach(function (c) {
      var row = el('tr', {cls: 'case-row', tabindex: '0', id: 'case-' + c.i, 'data-id': c.id},
        el('td', {text: c.kind}), el('td', {text: c.impl}), el('td', {text: c.op}),
        el('td', {text: c.dtype + ' ' + c.pass}), el('td', {text: c.shape}), el('td', {text: num(c.M)}),
        el('td', {text: String(c.tp)}), el('td', {cls: 'st-' + c.verdict, text: (FAILING[c.verdict] ? '\u2717 ' : '') + c.verdict}),
        el('td', {text: c.layouts}));
      body.appendChild(row);
      var holder = el('tr', {cls: 'detail'});
      holder.hidden = true;
      body.appendChild(holder);
      row.addEventListener('click', function () { toggle(row, holder, c); });
      row.addEventListener('keydown', function (e) {
        if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); toggle(row, holder, c); }
      });
      if (failing(c)) toggle(row, holder, c);
    });
    table.appendChild(body);
    return table;
  }
  function toggle(row, holder, c) {
    if (!holder.firstChild) holder.appendChild(el('td', {colspan: 8}, detail(c)));
    holder.hidden = !holder.hidden;
    row.setAttribute('aria-expanded', String(!holder.hidden));
  }
  function showList(title, list) {
    var limit = 500;
    list.sort(function (a, b) { return rank(a) - rank(b) || a.i - b.i; });
    panel.textContent = '';
    panel.appendChild(el('h3', {text: title}));
    if (list.length > limit) panel.appendChild(el('p', {cls: 'note', text: 'the first ' + limit + ' of ' + list.length + ' shown'}));
    panel.appendChild(caseTable(list, limit));
    panel.hidden = false;
  }
  function openCell(button) {
    if (openCellButton) openCellButton.parentNode.classList.remove('open');
    openCellButton = button;
    button.parentNode.classList.add('open');
    var d = button.dataset;
    var list = cases.filter(function (c) { return c.row === d.op && c.dtype === d.dtype && c.pass === d.pass; });
    showList(d.op + ' ' + d.dtype + ' ' + d.pass + ': ' + list.length + ' cases', list);
  }
  function closePanel() {
    panel.hidden = true;
    panel.textContent = '';
    if (openCellButton) { openCellButton.parentNode.classList.remove('open'); openCellButton.focus(); }
    openCellButton = null;
  }
  function openCase(id) {
    var c = byId[id];
    if (!c) return false;
    var button = null;
    document.querySelectorAll('#matrix td.cell button').forEach(function (b) {
      if (b.dataset.op === c.row && b.dataset.dtype === c.dtype && b.dataset.pass === c.pass) button = b;
    });
    if (button) openCell(button);
    else showList(c.id, [c]);
    var row = document.getElementById('case-' + c.i);
    if (!row) return false;
    if (row.nextSibling.hidden) toggle(row, row.nextSibling, c);
    row.scrollIntoView({block: 'center'});
    row.focus();
    return true;
  }
  function matches(c, tokens) {
    return tokens.every(function (t) {
      var colon = t.indexOf(':');
      if (colon > 0) {
        var key = t.slice(0, colon), value = t.slice(colon + 1);
        if (key in {op: 1, impl: 1, verdict: 1, dtype: 1, pass: 1}) return c[key] === value;
        if (key === 'tp') return String(c.tp) === value;
        if (key === 'kind') return c.kind.indexOf(value) === 0;
      }
      return (c.id + ' ' + c.verdict + ' ' + c.kind).indexOf(t) >= 0;
    });
  }
  function applyFilter() {
    var tokens = filterBox.value.trim().split(/\s+/).filter(Boolean);
    var cells = document.querySelectorAll('#matrix td.cell');
    if (!tokens.length) {
      cells.forEach(function (td) { td.classList.remove('dim'); });
      if (!openCellButton) closePanel();
      return;
    }
    var list = cases.filter(function (c) { return matches(c, tokens); });
    var hit = {};
    list.forEach(function (c) { hit[c.row + '|' + c.dtype + '|' + c.pass] = 1; });
    cells.forEach(function (td) {
      var d = td.firstChild.dataset;
      td.classList.toggle('dim', !hit[d.op + '|' + d.dtype + '|' + d.pass]);
    });
    if (openCellButton) openCellButton.parentNode.classList.remove('open');
    openCellButton = null;
    showList(list.length + ' cases match "' + filterBox.value.trim() + '"', list);
  }
  function matrixMove(button, key) {
    var td = button.parentNode, tr = td.parentNode;
    var col = Array.prototype.indexOf.call(tr.children, td);
    var target = null;
    if (key === 'ArrowLeft') target = td.previousElementSibling;
    if (key === 'ArrowRight') target = td.nextElementSibling;
    if (key === 'ArrowUp' && tr.previousElementSibling) target = tr.previousElementSibling.children[col];
    if (key === 'ArrowDown' && tr.nextElementSibling) target = tr.nextElementSibling.children[col];
    if (target && target.classList.contains('cell')) target.firstChild.focus();
  }
  function stepCase(delta) {
    var rows = Array.prototype.slice.call(panel.querySelectorAll('tr.case-row'));
    if (!rows.length) return;
    var at = rows.indexOf(document.activeElement);
    rows[Math.max(0, Math.min(rows.length - 1, at < 0 ? 0 : at + delta))].focus();
  }

  document.querySelectorAll('#matrix td.cell button').forEach(function (b) {
    b.addEventListener('click', function () { openCell(b); });
    b.addEventListener('keydown', function (e) {
      if (e.key.indexOf('Arrow') === 0) { e.preventDefault(); matrixMove(b, e.key); }
    });
  });
  document.querySelectorAll('button.filter-link').forEach(function (b) {
    b.addEventListener('click', function () { filterBox.value = b.dataset.filter; applyFilter(); panel.scrollIntoView(); });
  });
  document.querySelectorAll('a.case-link').forEach(function (a) {
    a.addEventListener('click', function () { openCase(decodeURIComponent(a.getAttribute('href').slice(6))); });
  });
  filterBox.addEventListener('input', applyFilter);
  document.addEventListener('keydown', function (e) {
    var typing = e.target === filterBox;
    if (e.key === 'Escape') { if (typing) { filterBox.value = ''; applyFilter(); } closePanel(); return; }
    if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === '/') { e.preventDefault(); filterBox.focus(); }
    else if (e.key === 'j') stepCase(1);
    else if (e.key === 'k') stepCase(-1);
  });
  function fromHash() {
    var hash = location.hash;
    if (hash.indexOf('#case=') === 0) openCase(decodeURIComponent(hash.slice(6)));
  }
  window.addEventListener('hashchange', fromHash);
  fromHash();
  window.bitcheckPage = {openCase: openCase, openCell: openCell, cases: cases};
})();
