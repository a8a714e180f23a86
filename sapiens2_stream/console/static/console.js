// sapiens2-stream console: live players (fragmented MP4 over a WebSocket into Media Source Extensions, MJPEG
// where MSE is missing), the status of every source and the latest events with their snapshots, refreshed every
// 2 s. Plain JavaScript, no CDN.
"use strict";
const TARGET_S = 0.2, JUMP_S = 1.0, KEEP_S = 10;  // behind the newest data: aim, jump to the live edge, buffer kept

function api(path) { return "/api/v1/sources" + path; }

function play(video, name) {
  const stats = {fragments: 0, jumps: 0};
  video.muted = true; video.autoplay = true; video.playsInline = true;
  if (!window.MediaSource) {  // no MSE: the MJPEG fallback
    const img = document.createElement("img");
    img.src = api("/" + encodeURIComponent(name) + "/live.mjpeg"); img.className = video.className;
    video.replaceWith(img);
    return stats;
  }
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + api("/" + encodeURIComponent(name) + "/live.mp4"));
  ws.binaryType = "arraybuffer";
  const queue = [];
  let buffer = null;
  const feed = () => {
    if (buffer && !buffer.updating && queue.length) buffer.appendBuffer(queue.shift());
  };
  const keepUp = () => {  // keep 0.1-0.3 s behind the newest data; jump when more than 1 s behind
    if (!buffer || !video.buffered.length) return;
    const end = video.buffered.end(video.buffered.length - 1);
    const behind = end - video.currentTime;
    if (behind > JUMP_S || video.currentTime < video.buffered.start(0)) {
      video.currentTime = end - TARGET_S; stats.jumps++;
    }
    video.playbackRate = behind > TARGET_S + 0.1 ? 1.1 : 1.0;
    if (video.paused) video.play().catch(() => {});
    if (!buffer.updating && video.currentTime - video.buffered.start(0) > KEEP_S) {
      buffer.remove(0, video.currentTime - KEEP_S / 2);
    }
  };
  ws.onmessage = (event) => {
    if (typeof event.data === "string") {
      const info = JSON.parse(event.data);
      if (info.error) { video.title = info.error; return; }
      const source = new MediaSource();
      video.src = URL.createObjectURL(source);
      source.addEventListener("sourceopen", () => {
        buffer = source.addSourceBuffer('video/mp4; codecs="' + info.codec + '"');
        // a viewer joins at the latest keyframe, up to a keyframe interval back: on to the live edge at once
        buffer.addEventListener("updateend", () => { if (!queue.length) keepUp(); feed(); });
        feed();
      });
      return;
    }
    queue.push(event.data); stats.fragments++; feed();
  };
  ws.onclose = () => { stats.closed = true; };
  setInterval(keepUp, 250);
  return stats;
}

function escaped(text) {
  const span = document.createElement("span");
  span.textContent = text;
  return span.innerHTML;
}

function badge(state) { return '<span class="badge ' + escaped(state) + '">' + escaped(state) + "</span>"; }

function connectionText(c) {  // a camera not delivering: why, and when it is tried next
  if (!c || c.state === "live") return "";
  const next = c.next_attempt_in_s === null ? "" : ", next try in " + Math.round(c.next_attempt_in_s) + " s";
  return " (" + escaped((c.reason || "no frame yet") + next) + ")";
}

function numbers(s) {
  const age = s.last_result_age_s === null ? "-" : s.last_result_age_s.toFixed(1) + " s";
  const where = s.worker ? ", on " + s.worker + " (node " + s.node.slice(0, 8) + ")" : "";  // a fleet's camera
  return badge(s.state) + connectionText(s.connection) + " in " + s.fps_in.toFixed(1) + " / written " +
    s.fps_written.toFixed(1) + " frames/s, last result " + age + ", " + s.people + " in view" + escaped(where);
}

function eventText(e) {  // "12.4 s  door: crossing in, track 3"
  const where = e.zone !== undefined ? e.zone + ": " : e.line !== undefined ? e.line + ": " : "";
  const detail = e.direction ? " " + e.direction : e.dwell_s !== undefined ? " after " + e.dwell_s.toFixed(1) + " s" : "";
  const who = e.track_id !== undefined && e.track_id !== null ? ", track " + e.track_id : "";
  return e.time_s.toFixed(1) + " s  " + where + e.kind + detail + who;
}

const SHOWN_ANGLES = ["right knee", "left knee", "right hip", "left hip", "right elbow", "left elbow", "trunk",
  "knee_angle_r", "knee_angle_l", "hip_flexion_r", "hip_flexion_l", "lumbar_extension"];
function anglesTable(angles) {  // each person's live joint angles (angles:), degrees
  if (!angles || !Object.keys(angles).length) return "";
  const one = (a, name) => { const v = (a["2d"] || {})[name] ?? (a["3d"] || {})[name]; return v == null ? "-" : v.toFixed(0); };
  const names = SHOWN_ANGLES.filter(n => Object.values(angles).some(a => n in (a["2d"] || {}) || n in (a["3d"] || {})));
  let html = "<tr><th>person</th><th>side</th>" + names.map(n => "<th>" + escaped(n) + "</th>").join("") + "</tr>";
  for (const [id, a] of Object.entries(angles))
    html += "<tr><td>" + escaped(id) + "</td><td>" + escaped(a.side || "") + "</td>" +
      names.map(n => "<td>" + one(a, n) + "</td>").join("") + "</tr>";
  return html;
}

function countsText(c) {  // "zones: bay 2 · lines: door in 3 / out 1"
  if (!c) return "";
  const zones = Object.entries(c.zones).map(([n, k]) => n + " " + k).join(", ");
  const lines = Object.entries(c.lines).map(([n, d]) => n + " " + Object.entries(d).map(([k, v]) => k + " " + v)
    .join(" / ")).join(", ");
  return [zones && "zones: " + zones, lines && "lines: " + lines].filter(Boolean).join(" · ");
}

async function eventList(only) {  // the latest events, newest first; `only`: one source's
  const list = document.getElementById("events"), KEEP = 100;
  let since = 0;
  async function refresh() {
    const events = await (await fetch("/api/v1/events?since=" + since)).json();
    for (const e of events) {
      since = e.seq;
      if (only && e.source !== only) continue;
      const item = document.createElement("li");
      item.className = "event"; item.dataset.kind = e.kind;
      if (e.snapshot_url) {
        const link = document.createElement("a"), img = document.createElement("img");
        link.href = e.snapshot_url; img.src = e.snapshot_url; img.loading = "lazy"; img.alt = e.kind;
        link.appendChild(img); item.appendChild(link);
      }
      const text = document.createElement("span");
      text.textContent = (only ? "" : e.source + "  ") + eventText(e);
      item.appendChild(text);
      list.prepend(item);
    }
    while (list.children.length > KEEP) list.lastChild.remove();
  }
  await refresh();
  setInterval(refresh, 2000);
}

// Live motion capture: each person's skeleton from above (X right, Y up the page) and from the front (X right, Z
// up), in the calibration's world frame, scaled to fit everyone with a 3 m span at least.
function drawView(canvas, moment, across, up) {
  const g = canvas.getContext("2d"), w = canvas.width, h = canvas.height;
  g.fillStyle = "#000"; g.fillRect(0, 0, w, h);
  const points = moment.people.flatMap((p) => p.keypoints_3d.filter(Boolean));
  if (!points.length) return 0;
  const lo = [0, 1, 2].map((i) => Math.min(...points.map((q) => q[i])));
  const hi = [0, 1, 2].map((i) => Math.max(...points.map((q) => q[i])));
  const span = Math.max(3, hi[across] - lo[across], hi[up] - lo[up]) * 1.1;
  const scale = Math.min(w, h) / span, mid = [0, 1, 2].map((i) => (lo[i] + hi[i]) / 2);
  const at = (q) => [w / 2 + (q[across] - mid[across]) * scale, h / 2 - (q[up] - mid[up]) * scale];
  let drawn = 0;
  for (const person of moment.people) {
    const k = person.keypoints_3d;
    for (const [a, b, colour] of moment.links) {
      if (!k[a] || !k[b]) continue;
      const [x0, y0] = at(k[a]), [x1, y1] = at(k[b]);
      g.strokeStyle = "rgb(" + colour.join(",") + ")"; g.lineWidth = 2;
      g.beginPath(); g.moveTo(x0, y0); g.lineTo(x1, y1); g.stroke(); drawn++;
    }
    const head = k[0] || k.find(Boolean);
    if (head) { const [x, y] = at(head); g.fillStyle = "#fff"; g.fillText("#" + person.id, x + 4, y - 4); }
  }
  return drawn;
}

const SHOWN_COORDINATES = ["knee_angle_r", "knee_angle_l", "hip_flexion_r", "hip_flexion_l", "ankle_angle_r",
  "ankle_angle_l", "arm_flex_r", "arm_flex_l", "elbow_flex_r", "elbow_flex_l", "pelvis_tilt"];
function kinematicsTable(people) {  // each person's OpenSim coordinates (kinematics:), degrees, or why not yet
  const shown = people.filter((p) => "kinematics" in p);
  if (!shown.length) return "";
  let html = "<tr><th>person</th>" + SHOWN_COORDINATES.map((n) => "<th>" + escaped(n) + "</th>").join("") + "</tr>";
  for (const p of shown) {
    const cells = p.kinematics ? SHOWN_COORDINATES.map((n) => "<td>" + (p.kinematics[n] == null ? "-" :
      p.kinematics[n].toFixed(0)) + "</td>").join("") :
      "<td colspan=" + SHOWN_COORDINATES.length + ">" + escaped(p.kinematics_why || "") + "</td>";
    html += "<tr><td>#" + escaped(String(p.id)) + "</td>" + cells + "</tr>";
  }
  return html;
}

async function threeD() {  // shown only when the run triangulates several cameras
  const first = await fetch("/api/v1/3d");
  if (first.status !== 200) return;
  document.getElementById("threed").hidden = false;
  const above = document.getElementById("above"), front = document.getElementById("front");
  const info = document.getElementById("threed-info");
  async function refresh() {
    const moment = await (await fetch("/api/v1/3d")).json();
    window.linksDrawn = drawView(above, moment, 0, 1) + drawView(front, moment, 0, 2);
    document.getElementById("kinematics").innerHTML = kinematicsTable(moment.people);
    info.textContent = moment.time === null ? "waiting for the cameras" : moment.people.length + " people at " +
      moment.time.toFixed(2) + " s from " + moment.views.join(", ");
  }
  await refresh();
  setInterval(refresh, 200);
}

async function grid() {
  const tiles = document.getElementById("tiles"), shown = {};
  async function refresh() {
    const sources = await (await fetch(api(""))).json();
    for (const s of sources) {
      if (!shown[s.name]) {
        const tile = document.createElement("div");
        tile.className = "tile"; tile.id = "tile-" + s.name;
        tile.innerHTML = '<a href="/sources/' + encodeURIComponent(s.name) + '"><video class="live"></video></a>' +
          '<div class="name"></div><div class="numbers"></div><div class="counts"></div>';
        tiles.appendChild(tile);
        tile.querySelector(".name").textContent = s.name;
        shown[s.name] = {tile, player: play(tile.querySelector("video"), s.name)};
      }
      shown[s.name].tile.querySelector(".numbers").innerHTML = numbers(s);
      shown[s.name].tile.querySelector(".counts").textContent = countsText(s.event_counts);
    }
    for (const name of Object.keys(shown)) {
      if (!sources.some((s) => s.name === name)) { shown[name].tile.remove(); delete shown[name]; }
    }
  }
  await refresh();
  setInterval(refresh, 2000);
  eventList();
  threeD();
}

async function source() {
  const name = decodeURIComponent(location.pathname.split("/").pop());
  document.getElementById("title").textContent = name;
  window.player = play(document.getElementById("live"), name);
  const base = api("/" + encodeURIComponent(name));
  document.getElementById("keypoints").onclick = () => {
    const start = document.getElementById("start").value || "", end = document.getElementById("end").value || "";
    location.href = base + "/keypoints.jsonl?start=" + (start || "-inf") + "&end=" + (end || "inf");
  };
  async function refresh() {
    const s = await (await fetch(base)).json();
    document.getElementById("numbers").innerHTML = numbers(s) + ", " + s.frames_out + " frames written, " +
      s.reconnects + " reconnects, dropped " + JSON.stringify(s.dropped);
    document.getElementById("counts").textContent = countsText(s.event_counts);
    document.getElementById("angles").innerHTML = anglesTable(s.angles);
    const files = await (await fetch(base + "/recordings")).json();
    const list = document.getElementById("recordings");
    list.innerHTML = "";
    for (const f of files.reverse()) {
      const item = document.createElement("li"), link = document.createElement("a");
      link.href = base + "/recordings/" + f.file; link.textContent = f.file;
      item.appendChild(link);
      item.append(" " + (f.bytes / 1e6).toFixed(1) + " MB" + (f.recording ? " (recording)" : ""));
      list.appendChild(item);
    }
  }
  await refresh();
  setInterval(refresh, 2000);
  eventList(name);
}
