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
  var current = 0;
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
  document.addEventListener("keydown", function (ev) {
    var el = document.activeElement;
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
