// The page's behaviour: filters over the finding cards (their data attributes), and on the live page signing in
// with a bearer token and fetching the findings again every few seconds. Nothing here writes HTML from data: the
// findings come as HTML the watcher escaped, and everything else is set as text.
(() => {
  "use strict";
  document.addEventListener("DOMContentLoaded", () => {
    const main = document.getElementById("findings");
    const filters = setUpFilters(main);
    keepDetailsOpenInPrint(main);
    if (document.body.dataset.live === "true") {
      setUpLive(main, filters);
    }
  });

  function setUpFilters(main) {
    const bar = document.getElementById("filters");
    const selects = [...bar.querySelectorAll("select[data-filter]")];
    const count = document.getElementById("filter-count");
    const noMatch = document.getElementById("no-match");
    const cards = () => [...main.querySelectorAll("article.finding")];
    const name = (key, value) =>
      key === "namespace" && value === "" ? "(cluster-scoped)" : key === "type" ? value.replaceAll("_", " ") : value;

    // Options from the cards there are (again after the findings were fetched anew), keeping what was chosen.
    function refresh() {
      const shown = cards();
      for (const select of selects) {
        const key = select.dataset.filter;
        const chosen = select.selectedIndex > 0 ? select.value : null;
        const values = [...new Set(shown.map((card) => card.dataset[key] ?? ""))].sort();
        select.replaceChildren(new Option("All", ""), ...values.map((value) => new Option(name(key, value), value)));
        const index = chosen === null ? -1 : values.indexOf(chosen);
        select.selectedIndex = index + 1;
      }
      apply();
    }

    function apply() {
      const all = cards();
      let shown = 0;
      for (const card of all) {
        const match = selects.every(
          (select) => select.selectedIndex <= 0 || (card.dataset[select.dataset.filter] ?? "") === select.value,
        );
        card.classList.toggle("filtered-out", !match);
        shown += match ? 1 : 0;
      }
      bar.hidden = all.length === 0; // nothing to filter (yet)
      const noun = all.length === 1 ? "finding" : "findings";
      count.textContent = `Showing ${shown} of ${all.length} ${noun}`;
      noMatch.hidden = !(all.length > 0 && shown === 0);
    }

    for (const select of selects) select.addEventListener("change", apply);
    document.getElementById("filter-clear").addEventListener("click", () => {
      for (const select of selects) select.selectedIndex = 0;
      apply();
    });
    refresh();
    return { refresh };
  }

  // Printed, the tables behind "Writes by writer" belong on paper too.
  function keepDetailsOpenInPrint(main) {
    let opened = [];
    window.addEventListener("beforeprint", () => {
      opened = [...main.querySelectorAll("details:not([open])")];
      for (const details of opened) details.open = true;
    });
    window.addEventListener("afterprint", () => {
      for (const details of opened) details.open = false;
      opened = [];
    });
  }

  function setUpLive(main, filters) {
    const TOKEN = "fightwatch.token"; // in session storage: this tab only, gone when it closes
    const body = document.body;
    // The page's own query (?incident=..., ?namespace=...) filters the findings fetched too.
    const url = body.dataset.fragmentUrl + (location.search ? "&" + location.search.slice(1) : "");
    const every = Math.max(Number(body.dataset.refresh) || 30, 2) * 1000;
    const controls = document.getElementById("live-controls");
    const text = document.getElementById("live-text");
    const pause = document.getElementById("live-pause");
    const forget = document.getElementById("live-forget");
    const message = document.getElementById("live-message");
    const signin = document.getElementById("signin");
    const form = document.getElementById("signin-form");
    const input = document.getElementById("signin-token");
    let timer = null;
    let paused = false;
    let updated = null;
    let generation = 0; // answers to a request made before the token changed are dropped

    const token = () => sessionStorage.getItem(TOKEN);
    const clock = (date) => date.toISOString().slice(11, 19) + " UTC";

    function say(words, kind) {
      message.textContent = words;
      message.className = "live-message " + (kind || "");
      message.hidden = !words;
    }

    function status() {
      const when = updated ? ` · updated ${clock(updated)}` : "";
      text.textContent = (paused ? "Paused" : "Live") + when;
      controls.classList.toggle("paused", paused);
      pause.textContent = paused ? "Resume" : "Pause";
      pause.setAttribute("aria-pressed", String(paused));
      forget.hidden = !token();
    }

    function schedule(delay = every) {
      clearTimeout(timer);
      timer = paused ? null : setTimeout(load, delay);
    }

    function askForToken(words) {
      clearTimeout(timer);
      controls.hidden = true;
      signin.hidden = false;
      say(words, "");
      input.focus();
    }

    function show(html) {
      const open = new Set([...main.querySelectorAll("details[open][data-key]")].map((d) => d.dataset.key));
      main.innerHTML = html; // the watcher's own escaped HTML: no script runs from it (and the policy forbids it)
      for (const details of main.querySelectorAll("details[data-key]")) {
        if (open.has(details.dataset.key)) details.open = true;
      }
      filters.refresh();
    }

    async function load() {
      const asked = generation;
      const bearer = token();
      let response;
      try {
        response = await fetch(url, {
          credentials: "same-origin",
          cache: "no-store",
          headers: bearer ? { Authorization: "Bearer " + bearer } : {},
        });
      } catch {
        if (asked === generation) retry("The watcher cannot be reached; retrying.");
        return;
      }
      if (asked !== generation) return;
      if (response.ok) {
        show(await response.text());
        updated = new Date();
        signin.hidden = true;
        controls.hidden = false;
        controls.classList.remove("failing");
        say("", "");
        status();
        schedule();
      } else if (response.status === 401) {
        sessionStorage.removeItem(TOKEN);
        main.replaceChildren();
        askForToken(bearer ? "The token was not accepted. Sign in with another one." : "");
      } else if (response.status === 403) {
        main.replaceChildren();
        askForToken("This token is not allowed to see findings here. Sign in with another one.");
      } else if (response.status === 503) {
        retry("The API server cannot check the token now, retrying.");
      } else {
        retry(`The watcher answered ${response.status}; retrying.`);
      }
    }

    function retry(words) {
      say(words, "retrying");
      controls.classList.add("failing");
      schedule(Math.min(every, 10000));
    }

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const value = input.value.trim();
      if (!value) return;
      sessionStorage.setItem(TOKEN, value);
      input.value = "";
      generation += 1;
      say("", "");
      load();
    });
    pause.addEventListener("click", () => {
      paused = !paused;
      status();
      if (paused) clearTimeout(timer);
      else load();
    });
    forget.addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN);
      generation += 1;
      updated = null;
      main.replaceChildren();
      filters.refresh();
      askForToken("The token is forgotten.");
    });

    if (body.dataset.signedIn === "true") {
      updated = new Date();
      controls.hidden = false;
      status();
      schedule();
    } else if (token()) {
      load();
    } else {
      askForToken("");
    }
  }
})();
