// nsqadmin pages: confirmed admin actions (and what they answered), the periodic refresh of <main id="live">, the
// counter, and the charts' value under the pointer and times in the viewer's time zone.
// Pages are readable without this file; it only adds actions and liveness.
(() => {
  "use strict";

  const token = document.querySelector('meta[name="nsqadmin-token"]');
  // the session token proves an action comes from the admin's own page (security.py)
  const API_HEADERS = {"Content-Type": "application/json", "Accept": "application/vnd.nsq; version=1.0",
                       "X-NSQAdmin-Token": token ? token.content : ""};
  const COUNTER_MAX_DELAY = 10000;
  let pending = 0; // actions and refreshes in flight: a timed refresh waits for them
  let generation = 0; // each refresh's number: only the newest one may replace the view
  let chosen = null; // the button whose confirmation is being asked
  let pointed = null; // the chart whose value under the pointer is shown: no refresh swaps it away meanwhile

  const banner = (text, kind = "error") => {
    const el = document.getElementById("action-error");
    if (!el) return;
    el.className = "banner banner-" + kind;
    el.textContent = text;
    el.hidden = !text;
  };

  // what an action answered beyond success: how many dead letters a replay moved back, how many messages a rewind
  // put back, and a partial failure
  // ("WARNING: ..." from the nodes that did not answer)
  const outcome = async (resp) => {
    let answer = {};
    try {
      answer = (await resp.json()) || {};
    } catch (_) { /* no JSON: nothing to tell */ }
    const parts = [];
    if (typeof answer.replayed === "number") {
      const count = answer.replayed;
      parts.push(`Replayed ${count.toLocaleString("en-US")} dead letter${count === 1 ? "" : "s"}.`);
    }
    if (typeof answer.rewound === "number") {
      const count = answer.rewound;
      parts.push(`Rewound ${count.toLocaleString("en-US")} message${count === 1 ? "" : "s"}.`);
    }
    if (answer.message) parts.push(answer.message);
    banner(parts.join(" "), answer.message ? "warning" : "ok");
  };

  // nsqadmin answers errors as {"message": "..."}; anything else (a proxy's page) falls back to the status
  const errorText = async (resp) => {
    try {
      const body = await resp.json();
      if (body && body.message) return body.message;
    } catch (_) { /* not JSON: use the status line */ }
    return resp.status + " " + resp.statusText;
  };

  const send = async (method, url, body, redirect) => {
    pending += 1;
    generation += 1; // a refresh started before the action would show the state before it
    banner("");
    try {
      const resp = await fetch(url, {method, headers: API_HEADERS, body: body || undefined, credentials: "same-origin"});
      if (!resp.ok) {
        banner(await errorText(resp));
        return false;
      }
      if (redirect) {
        window.location.assign(redirect);
        return true;
      }
      await outcome(resp);
    } catch (err) {
      banner("request failed: " + err.message);
      return false;
    } finally {
      pending -= 1;
    }
    await refresh();
    return true;
  };

  const run = (button) => {
    button.disabled = true;
    const {method, url, body, redirect} = button.dataset;
    send(method, url, body, redirect).finally(() => { button.disabled = false; });
  };

  const confirmThen = (button) => {
    const dialog = document.getElementById("confirm");
    const text = button.dataset.confirm;
    if (!text) return run(button);
    if (!dialog || typeof dialog.showModal !== "function") {
      if (window.confirm(text)) run(button);
      return;
    }
    chosen = button;
    document.getElementById("confirm-text").textContent = text;
    dialog.returnValue = "";
    dialog.showModal();
    document.getElementById("confirm-ok").focus();
  };

  const onDialogClose = (event) => {
    const button = chosen;
    chosen = null;
    if (button && event.target.returnValue === "ok") run(button);
  };

  // delegated, so buttons swapped in by a refresh work too
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-url][data-method]");
    if (!button || button.disabled) return;
    event.preventDefault();
    confirmThen(button);
  });

  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form.create-form[data-url]");
    if (!form) return;
    event.preventDefault();
    const fields = new FormData(form);
    const body = JSON.stringify({topic: fields.get("topic") || "", channel: fields.get("channel") || ""});
    send("POST", form.dataset.url, body, "").then((ok) => { if (ok) form.reset(); });
  });

  // an action with values typed in (a topic's retention, a channel's rewind): confirmed as a button's, naming them
  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form.action-form[data-url]");
    if (!form) return;
    event.preventDefault();
    const body = {action: form.dataset.action};
    for (const [key, value] of new FormData(form)) body[key] = String(value).trim();
    const named = Object.entries(body).filter(([key, value]) => key !== "action" && value)
      .map(([key, value]) => `${key} ${value}`).join(", ");
    const action = {disabled: false, dataset: {method: "POST", url: form.dataset.url, body: JSON.stringify(body),
                                               confirm: `${form.dataset.confirm} (${named})?`}};
    confirmThen(action);
  });

  // --- live refresh ------------------------------------------------------------------------------------------

  const live = () => document.getElementById("live");

  const dialogOpen = () => {
    const dialog = document.getElementById("confirm");
    return Boolean(dialog && dialog.open);
  };

  const busy = () => {
    const focused = document.activeElement;
    // someone typing into a form inside #live would lose the text to a swap
    const typing = focused && live() && live().contains(focused) && /^(INPUT|TEXTAREA|SELECT)$/.test(focused.tagName);
    return pending > 0 || dialogOpen() || Boolean(typing) || pointed !== null;
  };

  async function refresh() {
    const main = live();
    if (!main) return;
    pending += 1;
    const mine = ++generation;
    try {
      const resp = await fetch(window.location.href, {headers: {"X-Live-Fragment": "1"}, credentials: "same-origin"});
      const type = resp.headers.get("Content-Type") || "";
      // the admin's own error pages are fragments too; anything else (a proxy's error) keeps the last view
      if (type.startsWith("text/html")) {
        const html = await resp.text();
        // a dialog opened while this was loading refers to buttons that must stay in place
        if (!dialogOpen() && mine === generation) {
          main.innerHTML = html;
          localizeCharts(main);
        }
      }
    } catch (_) {
      // offline or the admin restarting: keep showing the last view and try again on the next tick
    } finally {
      pending -= 1;
    }
  }

  const startRefresh = () => {
    const main = live();
    const every = main ? Number(main.dataset.refresh) : 0;
    if (!every) return;
    setInterval(() => { if (!busy() && document.visibilityState !== "hidden") refresh(); }, every);
  };

  // --- charts ------------------------------------------------------------------------------------------------

  const clock = (seconds) => new Intl.DateTimeFormat([], {hour: "2-digit", minute: "2-digit", hourCycle: "h23",
                                                          second: seconds ? "2-digit" : undefined});
  const readable = (value) => Number(value).toLocaleString(undefined, {maximumFractionDigits: value < 100 ? 2 : 0});

  // the server labels times in UTC; the viewer reads them in their own time zone
  const localizeCharts = (root) => {
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
    for (const label of root.querySelectorAll("svg.chart .chart-time[data-ts]")) {
      label.textContent = clock(Boolean(label.dataset.seconds)).format(Number(label.dataset.ts) * 1000);
    }
    for (const name of root.querySelectorAll(".chart-zone .zone")) name.textContent = zone;
  };

  const numbers = (text) => text.split(",").map(Number);

  const showValue = (svg, event) => {
    const points = JSON.parse(svg.dataset.points);
    const [left, top, right, bottom] = numbers(svg.dataset.plot);
    const [start, end, yMax] = numbers(svg.dataset.span);
    const span = end - start || 1;
    const at = new DOMPoint(event.clientX, event.clientY).matrixTransform(svg.getScreenCTM().inverse());
    const ts = start + (at.x - left) / (right - left) * span;
    let nearest = points[0];
    for (const point of points) if (Math.abs(point[0] - ts) < Math.abs(nearest[0] - ts)) nearest = point;
    const x = left + (nearest[0] - start) / span * (right - left);
    const y = bottom - Math.max(nearest[1], 0) / yMax * (bottom - top);
    const pointer = svg.querySelector(".chart-pointer");
    pointer.querySelector("line").setAttribute("x1", x);
    pointer.querySelector("line").setAttribute("x2", x);
    pointer.querySelector("circle").setAttribute("cx", x);
    pointer.querySelector("circle").setAttribute("cy", y);
    pointer.setAttribute("visibility", "visible");
    const readout = svg.querySelector(".chart-readout");
    if (readout.dataset.latest === undefined) readout.dataset.latest = readout.textContent;
    readout.textContent = clock(true).format(nearest[0] * 1000) + " · " + readable(nearest[1]) +
      (svg.dataset.unit ? " " + svg.dataset.unit : "");
  };

  const hideValue = () => {
    if (!pointed) return;
    pointed.querySelector(".chart-pointer").setAttribute("visibility", "hidden");
    const readout = pointed.querySelector(".chart-readout");
    if (readout.dataset.latest !== undefined) readout.textContent = readout.dataset.latest;
    pointed = null;
  };

  // delegated, so charts swapped in by a refresh work too
  document.addEventListener("pointermove", (event) => {
    const svg = event.target.closest && event.target.closest("svg.chart[data-points]");
    if (svg !== pointed) hideValue();
    if (!svg) return;
    pointed = svg;
    showValue(svg, event);
  });
  document.addEventListener("pointerout", (event) => { if (!event.relatedTarget) hideValue(); });

  // --- counter -----------------------------------------------------------------------------------------------

  const animate = (el, from, to) => {
    const start = performance.now();
    const step = (now) => {
      const t = Math.min((now - start) / 600, 1);
      el.textContent = Math.round(from + (to - from) * t).toLocaleString("en-US");
      if (t < 1) window.requestAnimationFrame(step);
    };
    window.requestAnimationFrame(step);
  };

  // as nsqadmin: poll quickly at first, then back off by a second per poll up to ten seconds
  const startCounter = (el) => {
    let shown = Number(el.dataset.value) || 0;
    let delay = 100;
    const poll = async () => {
      try {
        const resp = await fetch(el.dataset.url, {headers: API_HEADERS, credentials: "same-origin"});
        if (!resp.ok) throw new Error(await errorText(resp));
        const data = await resp.json();
        let total = 0;
        for (const stat of Object.values(data.stats || {})) total += Number(stat.message_count) || 0;
        animate(el, shown, total);
        shown = total;
        banner(data.message || "", "warning");
      } catch (err) {
        banner(err.message);
      }
      delay = Math.min(delay + 1000, COUNTER_MAX_DELAY);
      window.setTimeout(poll, delay);
    };
    window.setTimeout(poll, delay);
  };

  const start = () => {
    const dialog = document.getElementById("confirm");
    if (dialog) dialog.addEventListener("close", onDialogClose);
    const counter = document.getElementById("counter");
    if (counter && counter.dataset.url) startCounter(counter);
    if (live()) localizeCharts(live());
    startRefresh();
  };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
