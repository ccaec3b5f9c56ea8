// The workbench's keyboard shortcuts and lease clock. Progressive: every page works without it (plain forms).
(function () {
  "use strict";
  var typing = function (el) {
    return el && (el.tagName === "INPUT" || el.tagName === "TEXTAREA" || el.tagName === "SELECT" || el.isContentEditable) &&
      el.type !== "radio" && el.type !== "checkbox";
  };
  var submit = function (id) {
    var f = document.getElementById(id);
    if (f) { f.requestSubmit ? f.requestSubmit() : f.submit(); return true; }
    return false;
  };
  var findings = function () { return Array.prototype.slice.call(document.querySelectorAll("ol.findings li")); };
  var current = -1;  // no finding chosen yet: j goes to the first
  var showFinding = function (step) {
    var items = findings();
    if (!items.length) { return; }
    current = (current + step + items.length) % items.length;
    items.forEach(function (li) { li.classList.remove("current"); });
    document.querySelectorAll("mark.current").forEach(function (m) { m.classList.remove("current"); });
    var li = items[current];
    li.classList.add("current");
    li.focus();
    var n = li.getAttribute("data-finding");
    var marks = document.querySelectorAll("mark[data-n]");
    var first = null;
    marks.forEach(function (m) {
      if (m.getAttribute("data-n").split(",").indexOf(n) >= 0) { m.classList.add("current"); first = first || m; }
    });
    if (first) { first.scrollIntoView({ block: "center" }); }
  };
  // the reviewer's word on the current finding: a accept, x reject, g holds at another severity (again: the next)
  var judge = function (decision) {
    var items = findings();
    if (!items.length) { return false; }
    var li = items[Math.max(0, current)];
    var sel = li.querySelector("select.judgement");
    if (!sel) { return false; }
    var opts = Array.prototype.slice.call(sel.options);
    var matching = opts.filter(function (o) { return o.getAttribute("data-decision") === decision; });
    if (!matching.length) { return false; }
    var at = matching.indexOf(sel.options[sel.selectedIndex]);
    sel.value = matching[(at + 1) % matching.length].value;
    li.classList.remove("judged-accept", "judged-reject", "judged-regrade");
    li.classList.add("judged-" + decision);
    return true;
  };
  // an error the findings missed: the selection in the candidate or the Pali, as code-point offsets into its text
  var codePoints = function (s) { return Array.from(s).length; };
  var pending = null;
  var selectedSpan = function () {
    var sel = window.getSelection();
    if (!sel || sel.rangeCount === 0 || sel.isCollapsed) { return null; }
    var r = sel.getRangeAt(0);
    var host = r.commonAncestorContainer;
    while (host && !(host.getAttribute && host.getAttribute("data-side"))) { host = host.parentNode; }
    if (!host) { return null; }
    var before = document.createRange();
    before.selectNodeContents(host);
    before.setEnd(r.startContainer, r.startOffset);
    var start = codePoints(before.toString());
    var text = r.toString();
    return { side: host.getAttribute("data-side"), start: start, end: start + codePoints(text), text: text };
  };
  var markSpan = function () {
    var dialog = document.getElementById("span-dialog");
    pending = selectedSpan();
    if (!dialog || !pending) {
      var help = document.getElementById("spans-help");
      if (help) { help.classList.add("nudge"); }
      return !!dialog;
    }
    document.getElementById("span-quote").textContent = "“" + pending.text + "” (" + pending.side + ")";
    dialog.showModal();
    document.getElementById("span-severity").focus();
    return true;
  };
  var addSpan = function () {
    if (!pending) { return; }
    var span = {
      side: pending.side, start: pending.start, end: pending.end,
      severity: document.getElementById("span-severity").value,
      category: document.getElementById("span-category").value
    };
    var li = document.createElement("li");
    li.textContent = span.severity + " " + span.category + " in the " + span.side + ": “" + pending.text + "” ";
    var input = document.createElement("input");
    input.type = "hidden"; input.name = "span"; input.value = JSON.stringify(span);
    var drop = document.createElement("button");
    drop.type = "button"; drop.className = "link"; drop.textContent = "remove";
    drop.addEventListener("click", function () { li.remove(); });
    li.appendChild(input); li.appendChild(drop);
    document.getElementById("spans").appendChild(li);
    pending = null;
  };
  var spanDialog = document.getElementById("span-dialog");
  if (spanDialog) {
    spanDialog.addEventListener("close", function () { if (spanDialog.returnValue === "add") { addSpan(); } });
    spanDialog.addEventListener("keydown", function (ev) {
      // added at once (the close event comes later; the span is in the form before the next key)
      if (ev.key === "Enter") { ev.preventDefault(); addSpan(); spanDialog.close("add"); }
    });
  }
  // Enter in a field of the verdict form never records the verdict (Ctrl+Enter does)
  var verdictForm = document.getElementById("verdict-form");
  // active time: seconds the page was shown and focused, sent with the verdict
  var active = document.getElementById("active-seconds");
  if (active) {
    var seconds = 0;
    window.setInterval(function () {
      if (document.visibilityState === "visible" && document.hasFocus()) { seconds += 1; }
    }, 1000);
    verdictForm.addEventListener("submit", function () { active.value = String(seconds); });
  }
  if (verdictForm) {
    verdictForm.addEventListener("keydown", function (ev) {
      var t = ev.target;
      if (ev.key === "Enter" && !ev.ctrlKey && !ev.metaKey && t && t.tagName === "INPUT") { ev.preventDefault(); }
    });
  }
  document.addEventListener("keydown", function (ev) {
    var el = document.activeElement;
    if (document.querySelector("dialog[open]")) { return; }
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      var form = document.getElementById("verdict-form");
      if (form) {
        ev.preventDefault();
        var next = form.querySelector("button[name=then][value=next]");
        form.requestSubmit ? form.requestSubmit(next) : form.submit();
      }
      return;
    }
    if (ev.key === "Escape" && typing(el)) { el.blur(); return; }
    if (typing(el) || ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    var radio = document.querySelector("#verdict-form input[name=label][data-key='" + ev.key + "']");
    if (radio) { radio.checked = true; radio.focus(); ev.preventDefault(); return; }
    var go = {
      "e": function () { var c = document.getElementById("category"); if (c) { c.focus(); return true; } return false; },
      "t": function () { var t = document.getElementById("note"); if (t) { t.focus(); return true; } return false; },
      "n": function () { return submit("claim-next"); },
      "r": function () { return submit("renew"); },
      "j": function () { showFinding(1); return true; },
      "k": function () { showFinding(-1); return true; },
      "a": function () { return judge("accept"); },
      "x": function () { return judge("reject"); },
      "g": function () { return judge("regrade"); },
      "m": function () { return markSpan(); },
      "q": function () {
        // on an item the reviewer holds, leaving releases it (the form); elsewhere the queue
        var leave = document.getElementById("leave");
        if (leave) { var b = leave.querySelector("button[name=then]"); leave.requestSubmit ? leave.requestSubmit(b) : leave.submit(); return true; }
        window.location.href = "/ui/queue"; return true;
      },
      "?": function () { var d = document.getElementById("keys"); if (d && d.showModal) { d.showModal(); return true; } return false; }
    }[ev.key];
    if (go && go()) { ev.preventDefault(); }
  });
  // the lease's time left, on the server's clock (the page says what time it was there)
  var lease = document.getElementById("lease");
  if (lease) {
    var offset = parseFloat(lease.getAttribute("data-now")) - Date.now() / 1000;
    var expires = parseFloat(lease.getAttribute("data-expires"));
    var left = lease.querySelector(".left");
    var tick = function () {
      var s = Math.floor(expires - (Date.now() / 1000 + offset));
      if (s <= 0) {
        lease.classList.add("gone");
        lease.textContent = "Your lease has ended: the item is back in the queue (claim it again to judge it).";
        return;
      }
      left.textContent = Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
      lease.classList.toggle("low", s < 120);
      window.setTimeout(tick, 1000);
    };
    tick();
  }
})();
