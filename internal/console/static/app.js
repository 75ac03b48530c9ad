// NebulaCtrl console: the CSRF header of htmx requests, and the live parts
// (the API's event streams, through the console's same-origin routes).
// No inline script anywhere: the Content-Security-Policy forbids it.
(function () {
  "use strict";

  function csrf() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.getAttribute("content") : "";
  }

  // htmx sends the session's CSRF token with every request it makes.
  function setHeaders() {
    var t = csrf();
    if (t) {
      document.body.setAttribute("hx-headers", JSON.stringify({ "X-CSRF-Token": t }));
    }
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }

  function when(iso) {
    var d = new Date(iso);
    if (isNaN(d.getTime())) { return iso; }
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  function setText(id, text) {
    var e = document.getElementById(id);
    if (e) { e.textContent = text; }
  }

  function showDeployment(d) {
    var st = document.getElementById("dep-status");
    if (st) { st.textContent = d.status; st.className = "badge st-" + d.status; }
    // A stage without counts (a terminal one may carry none) keeps the last.
    if (d.desired) { setText("dep-pods", d.ready + "/" + d.desired); }
    setText("dep-stalled", d.stalled ? "yes, since " + when(d.stalledSince) : "no");
    var b = d.blockers || [];
    setText("dep-blockers", b.length ? b.join(", ") + " (the cluster is Disconnected: the deployment is delivered when its agent is back)" : "none");
    setText("dep-reason", d.reason || "—");
  }

  // The deployment page: stages arrive over the deployment's stream.
  function followDeployment(box) {
    var url = box.getAttribute("data-events");
    if (!url || !window.EventSource) { return; }
    var list = document.getElementById("stages");
    var state = document.getElementById("stream-state");
    var seen = {};
    (box.getAttribute("data-last") || "").split(" ").forEach(function (s) { if (s) { seen[s] = true; } });
    var es = new EventSource(url);
    es.addEventListener("deployment", function (ev) { showDeployment(JSON.parse(ev.data)); });
    es.addEventListener("stage", function (ev) {
      var s = JSON.parse(ev.data);
      showDeployment(s);
      if (!seen[String(s.seq)]) {
        seen[String(s.seq)] = true;
        var li = el("li");
        li.setAttribute("data-seq", String(s.seq));
        li.appendChild(el("span", "badge st-" + s.stage, s.stage));
        li.appendChild(document.createTextNode(" "));
        var t = el("time", null, when(s.at));
        t.setAttribute("datetime", s.at);
        li.appendChild(t);
        if (s.desired) { li.appendChild(document.createTextNode(" · " + s.ready + "/" + s.desired + " ready")); }
        if (s.detail) { li.appendChild(document.createTextNode(" · " + s.detail)); }
        list.appendChild(li);
      }
      // Only the stage that ends the deployment ends the stream (a replayed
      // earlier stage already carries the deployment's final status).
      if (s.terminal) {
        es.close();
        if (state) { state.textContent = "This deployment has ended."; }
      }
    });
    es.onerror = function () {
      if (state && es.readyState === EventSource.CLOSED) { state.textContent = "The live connection closed; reload to follow again."; }
    };
  }

  function buildOver(status) {
    return status === "succeeded" || status === "failed" || status === "cancelled" || status === "timed_out";
  }

  function showBuild(b) {
    var st = document.getElementById("build-status");
    if (st) { st.textContent = b.status; st.className = "badge st-" + b.status; }
    if (b.commit) { setText("build-commit", b.commit); }
    if (b.startedAt) { setText("build-started", when(b.startedAt)); }
    if (b.finishedAt) { setText("build-finished", when(b.finishedAt)); }
    if (b.digest) { setText("build-image", b.image + "@" + b.digest); }
    if (b.reason) { setText("build-reason", b.reason); }
    if (b.exitCode) { setText("build-exit", String(b.exitCode)); }
    if (buildOver(b.status)) {
      var f = document.getElementById("cancel-form");
      if (f) { f.remove(); }
    }
  }

  // The build page: its output arrives over the build's log stream, from
  // the last line the page showed; the stream closes once the build is over
  // and its last lines are sent.
  function followBuild(box) {
    var url = box.getAttribute("data-events");
    if (!url || !window.EventSource) { return; }
    var log = document.getElementById("build-log");
    var state = document.getElementById("stream-state");
    var last = parseInt(box.getAttribute("data-last") || "0", 10) || 0;
    var status = "";
    var es = new EventSource(url);
    es.addEventListener("build", function (ev) {
      var b = JSON.parse(ev.data);
      status = b.status;
      showBuild(b);
    });
    es.addEventListener("line", function (ev) {
      var l = JSON.parse(ev.data);
      if (l.id <= last) { return; }
      last = l.id;
      var atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      var s = el("span", "log-line", l.text);
      s.setAttribute("data-id", String(l.id));
      log.appendChild(s);
      log.appendChild(document.createTextNode("\n"));
      log.hidden = false;
      var empty = document.getElementById("build-log-empty");
      if (empty) { empty.remove(); }
      if (atEnd) { log.scrollTop = log.scrollHeight; }
    });
    es.onerror = function () {
      if (buildOver(status)) {
        // Not a failure: the stream ends with the build.
        es.close();
        if (state) { state.textContent = "This build is over."; }
        return;
      }
      if (state && es.readyState === EventSource.CLOSED) { state.textContent = "The live connection closed; reload to follow again."; }
    };
  }

  // The service page: the environment's activity as it happens.
  function followActivity(list) {
    var url = list.getAttribute("data-events");
    if (!url || !window.EventSource) { return; }
    var es = new EventSource(url);
    es.addEventListener("audit", function (ev) {
      var a = JSON.parse(ev.data);
      var empty = list.querySelector(".empty");
      if (empty) { empty.remove(); }
      var li = el("li");
      var t = el("time", null, when(a.occurredAt));
      t.setAttribute("datetime", a.occurredAt);
      li.appendChild(t);
      li.appendChild(document.createTextNode(" " + ((a.actor && a.actor.name) || "") + " "));
      li.appendChild(el("strong", null, a.action));
      li.appendChild(document.createTextNode(" " + ((a.target && a.target.name) || "") + (a.detail ? " — " + a.detail : "")));
      list.insertBefore(li, list.firstChild);
    });
  }

  // auditLink is the console page of an audit entry's target (as
  // auditLink in internal/console/audit.go), or "" when it has none.
  function auditLink(org, a) {
    var t = a.target || {};
    var parts = (t.name || "").split("/");
    if (parts.length < 2 || parts[0] !== org || parts.indexOf("") >= 0) { return ""; }
    var p = function () {
      return Array.prototype.map.call(arguments, function (s) { return "/" + encodeURIComponent(s); }).join("");
    };
    var k = t.kind, n = parts.length;
    if ((k === "project" && n === 2) || (k === "service" && n === 4)) { return p("o", org, "p", parts[1]); }
    if (k === "environment" && n === 3) { return p("o", org, "p", parts[1], "e", parts[2]); }
    if (k === "deployment-target" && n === 4) { return p("o", org, "p", parts[1], "e", parts[2], "s", parts[3]); }
    if (k === "deployment" && n === 4 && t.id) { return p("o", org, "p", parts[1], "e", parts[2], "s", parts[3], "d", t.id); }
    if (k === "changeset" && n === 3 && t.id) { return p("o", org, "p", parts[1], "e", parts[2], "changesets", t.id); }
    if ((k === "cluster" && n === 2) || (k === "server" && n === 3)) { return p("o", org, "servers"); }
    return "";
  }

  // The audit log page: when it shows the end of the log, the
  // organisation's audit stream (filtered as the page, starting after its
  // last row) adds each new entry as a row. htmx swaps the rows when the
  // filter changes: the stream of the rows swapped out is closed.
  var auditStream = null;
  function followAudit() {
    var box = document.getElementById("audit-rows");
    if (auditStream && (!box || auditStream.box !== box)) { auditStream.close(); auditStream = null; }
    if (!box || auditStream) { return; }
    var url = box.getAttribute("data-events");
    if (!url || !window.EventSource) { return; }
    var org = box.getAttribute("data-org") || "";
    var table = document.getElementById("audit");
    var body = document.getElementById("audit-body");
    var seen = {};
    Array.prototype.forEach.call(body.querySelectorAll("tr[data-seq]"), function (tr) { seen[tr.getAttribute("data-seq")] = true; });
    var es = new EventSource(url);
    es.box = box;
    auditStream = es;
    es.addEventListener("audit", function (ev) {
      var a = JSON.parse(ev.data);
      if (seen[String(a.seq)]) { return; }
      seen[String(a.seq)] = true;
      var empty = document.getElementById("audit-empty");
      if (empty) { empty.remove(); }
      table.hidden = false;
      var tr = el("tr");
      tr.setAttribute("data-seq", String(a.seq));
      var td = el("td");
      var t = el("time", null, when(a.occurredAt));
      t.setAttribute("datetime", a.occurredAt);
      td.appendChild(t);
      tr.appendChild(td);
      tr.appendChild(el("td", null, ((a.actor && a.actor.name) || "") + (a.via ? " via " + a.via : "")));
      td = el("td");
      td.appendChild(el("code", null, a.action));
      tr.appendChild(td);
      td = el("td", null, ((a.target && a.target.kind) || "") + " ");
      var href = auditLink(org, a);
      if (href) {
        var link = el("a", null, a.target.name);
        link.setAttribute("href", href);
        td.appendChild(link);
      } else {
        td.appendChild(document.createTextNode((a.target && a.target.name) || ""));
      }
      tr.appendChild(td);
      tr.appendChild(el("td", null, a.detail || ""));
      body.appendChild(tr);
    });
  }

  function start() {
    setHeaders();
    followAudit();
    document.body.addEventListener("htmx:afterSettle", followAudit);
    var d = document.getElementById("deployment");
    if (d) { followDeployment(d); }
    var b = document.getElementById("build");
    if (b) { followBuild(b); }
    var a = document.getElementById("live-activity");
    if (a) { followActivity(a); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
