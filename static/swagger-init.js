// Starts the vendored Swagger UI (swagger-ui-bundle.js) on /schema with the schema the
// portal generates, named by the page itself: a file of its own, so the page needs no
// inline script and keeps the portal's content security policy (script-src 'self').
window.addEventListener("DOMContentLoaded", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.schemaUrl,
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout"
  });
});
