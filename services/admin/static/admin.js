// nsqadmin pages: confirmed admin actions, the periodic refresh of <main id="live">, and the counter.
// Pages are readable without this file; it only adds actions and liveness.
(() => {
  "use strict";

  const API_HEADERS = {"Content-Type": "application/json", "Accept": "application/vnd.nsq; version=1.0"};
  const COUNTER_MAX_DELAY = 10000;
  let pending = 0; // actions and refreshes in flight: a timed refresh waits for them
  let generation = 0; // each refresh's number: only the newest one may replace the view
  let chosen = null; // the button whose confirmation is being asked

  const banner = (text, kind = "error") => {
    const el = document.getElementById("action-error");
    if (!el) return;
    el.className = "banner banner-" + kind;
    el.textContent = text;
    el.hidden = !text;
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
    return pending > 0 || dialogOpen() || Boolean(typing);
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
        if (!dialogOpen() && mine === generation) main.innerHTML = html;
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
    startRefresh();
  };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
