// ---- Start. ----
function debounce(fn, wait) {
  let timer = null;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(fn, wait);
  };
}

for (const action of AUDIT_ACTIONS) $("audit-kind").append(new Option(action, action));
$("signin-form").addEventListener("submit", signIn);
$("sign-out").addEventListener("click", () => signOut(null));
$("timeline-window").addEventListener("change", drawTimeline);
$("rotate").addEventListener("click", askRotate);
$("rotate-yes").addEventListener("click", confirmRotate);
$("rotate-no").addEventListener("click", cancelRotate);
$("explain-form").addEventListener("submit", explain);
$("audit-kind").addEventListener("change", () => {
  auditCursor = null;
  loadAudit(false);
});
$("audit-more").addEventListener("click", () => loadAudit(true));
window.addEventListener("hashchange", route);
// Polling pauses in a hidden tab (service.js); shown again, the view catches up at once.
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && svc && !$("view-service").hidden) poll(generation);
});
window.addEventListener("resize", debounce(() => {
  if (!$("view-service").hidden) drawTimeline();
}, 150));

token = stored(TOKEN_KEY);
account = stored(ACCOUNT_KEY);
if (token) {
  enter();
} else {
  $("view-signin").hidden = false;
}
