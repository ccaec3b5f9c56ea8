// the page's one script of its own, a file so the page's Content-Security-Policy needs no inline script
Redoc.init("/schema/openapi.json", {}, document.getElementById("redoc-container"));
