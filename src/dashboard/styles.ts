// The dashboard's one stylesheet, served from /assets/dashboard.css (CSP allows styles only from
// this origin). Mobile first: one column on a phone, a grid from 720px. Tables made with
// dataTable() (class rt) turn into one block per row on a phone: key facts first, the rest labelled.

export const DASHBOARD_CSS = `
:root{--bg:#f6f7f9;--card:#fff;--ink:#1d2433;--muted:#5d6779;--line:#e3e6ec;--brand:#3b5bdb;--brand-ink:#fff;
--ok:#2b8a3e;--ok-bg:#ebfbee;--warn:#b35c00;--warn-bg:#fff4e6;--bad:#c92a2a;--bad-bg:#fff5f5;--info-bg:#edf2ff;
--radius:12px;font-synthesis:none}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--ink);font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,Ubuntu,sans-serif}
a{color:var(--brand)}
header.top{background:var(--card);border-bottom:1px solid var(--line)}
.top-inner{max-width:1040px;margin:0 auto;padding:10px 16px;display:flex;flex-wrap:wrap;align-items:center;gap:8px 16px}
.brand{font-weight:700;color:var(--ink);text-decoration:none;margin-right:auto;display:flex;align-items:center;gap:8px}
.brand-mark{display:inline-grid;place-items:center;width:28px;height:28px;border-radius:8px;background:var(--brand);color:#fff;font-size:14px}
nav.main{display:flex;flex-wrap:wrap;gap:4px;order:3;width:100%}
nav.main a{padding:6px 10px;border-radius:8px;text-decoration:none;color:var(--muted);font-weight:500}
nav.main a[aria-current=page]{background:var(--info-bg);color:var(--brand)}
.who{display:flex;align-items:center;gap:8px;color:var(--muted);font-size:14px;min-width:0;flex-wrap:wrap}
.who .small{overflow-wrap:anywhere;min-width:0}
nav.main .count{display:inline-block;min-width:20px;padding:0 6px;margin-left:4px;border-radius:999px;background:var(--bad);color:#fff;font-size:12px;line-height:20px;text-align:center;font-weight:700}
.who form{margin:0}
main{max-width:1040px;margin:0 auto;padding:20px 16px 48px;overflow-wrap:anywhere}
h1,h2{overflow-wrap:anywhere}
h1{font-size:1.6rem;margin:0 0 4px}
h2{font-size:1.15rem;margin:0 0 12px}
.lead{color:var(--muted);margin:0 0 20px}
.card{background:var(--card);border:1px solid var(--line);border-radius:var(--radius);padding:18px;margin-bottom:16px}
.grid{display:grid;gap:16px}
.stack>*+*{margin-top:12px}
.row{display:flex;flex-wrap:wrap;gap:8px;align-items:center}
.spread{display:flex;flex-wrap:wrap;gap:8px;align-items:center;justify-content:space-between}
.muted{color:var(--muted)}
.small{font-size:14px}
.big{font-size:1.8rem;font-weight:700}
.lead .approval{color:var(--ink)}
label{display:block;font-weight:600;margin-bottom:4px}
.hint{display:block;font-weight:400;color:var(--muted);font-size:14px}
input[type=text],input[type=email],input[type=number],input[type=url],input:not([type]),select{width:100%;max-width:420px;min-width:0;padding:10px 12px;border:1px solid #c5cbd6;border-radius:8px;font:inherit;background:#fff}
input:focus,select:focus,button:focus,a:focus{outline:3px solid #91a7ff;outline-offset:1px}
.field{margin-bottom:12px}
.inline-form{display:flex;flex-wrap:wrap;gap:8px;align-items:flex-end}
.inline-form .field{margin:0;flex:1 1 160px;min-width:0}
.field-error{color:var(--bad);font-size:14px;font-weight:600}
input[aria-invalid=true]{border-color:var(--bad);background:var(--bad-bg)}
.limit-warning{background:var(--warn-bg);color:var(--warn);border:1px solid #ffd8a8;border-radius:8px;padding:8px 12px;font-size:14px}
button,.button{display:inline-block;padding:10px 16px;border-radius:8px;border:1px solid var(--brand);background:var(--brand);color:var(--brand-ink);font:inherit;font-weight:600;cursor:pointer;text-decoration:none;min-height:44px}
button.secondary,.button.secondary{background:#fff;color:var(--brand)}
button.danger{background:var(--bad);border-color:var(--bad)}
button.link{background:none;border:none;color:var(--brand);padding:0;min-height:0;font-weight:500;text-decoration:underline}
.pill{display:inline-block;padding:2px 10px;border-radius:999px;font-size:13px;font-weight:600;background:var(--info-bg);color:var(--brand);white-space:nowrap}
.facts dd .pill{white-space:normal;max-width:100%}
.pill.ok{background:var(--ok-bg);color:var(--ok)}.pill.warn{background:var(--warn-bg);color:var(--warn)}.pill.bad{background:var(--bad-bg);color:var(--bad)}
.flash{border-radius:var(--radius);padding:12px 16px;margin-bottom:16px;border:1px solid}
.flash.ok{background:var(--ok-bg);border-color:#b2f2bb;color:#1b5e20}
.flash.bad{background:var(--bad-bg);border-color:#ffc9c9;color:#8a1c1c}
.flash.info{background:var(--info-bg);border-color:#bac8ff}
.flash.warn{background:var(--warn-bg);border-color:#ffd8a8;color:#7a3e00}
.copy-row{display:flex;flex-wrap:wrap;gap:8px;align-items:center}
.copy-row>.secret,.copy-row>.code-big{flex:1 1 220px;min-width:0}
button.copy{min-height:36px;padding:6px 14px}
.when time>span{white-space:nowrap}
.when .rel{color:var(--muted);font-size:.85em;white-space:nowrap}
.when .rel::before{content:" · "}
.secret{display:block;font:600 1.05rem/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#fff;border:1px dashed #845ef7;border-radius:8px;padding:10px 12px;word-break:break-all;user-select:all}
.code-big{overflow-wrap:anywhere;font:700 2.4rem/1.2 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;letter-spacing:.2em}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.92em;word-break:break-all}
.table-wrap{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{width:100%;border-collapse:collapse;font-size:15px}
th,td{text-align:left;padding:8px 10px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600;font-size:13px;text-transform:uppercase;letter-spacing:.03em}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.dense th,table.dense td{padding:6px 8px;font-size:14px}
table.dense th{white-space:nowrap}
table.dense td.nw{white-space:nowrap}
table.dense button{min-height:32px;padding:4px 10px;white-space:nowrap;font-size:14px}
tr.sub td{border-bottom:1px solid var(--line);padding-top:0}
table.deliveries tbody tr:first-child td{border-bottom:0}
.row details{flex:0 1 auto;min-width:0;max-width:100%}
.row details[open]{flex:1 1 100%}
.err{color:var(--bad);overflow-wrap:anywhere;word-break:break-word}
.why{color:var(--muted);font-size:14px;display:block}
.subject{font-size:14px}
.bot-list{list-style:none;margin:0;padding:0;display:grid;gap:12px}
.bot-item a.bot-name{font-weight:700;font-size:1.1rem;text-decoration:none}
.facts{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:8px 16px;margin:12px 0 0}
.facts dt{font-size:13px;color:var(--muted)}.facts dd{margin:0;font-weight:600;overflow-wrap:anywhere;min-width:0}
details>summary{cursor:pointer;font-weight:600;color:var(--brand);min-height:32px}
details[open]>summary{margin-bottom:10px}
.subnav{display:flex;gap:4px;flex-wrap:wrap;margin:0 0 16px;padding:0;list-style:none;border-bottom:1px solid var(--line)}
.subnav a{display:block;padding:8px 12px;text-decoration:none;color:var(--muted);border-bottom:2px solid transparent}
.subnav a[aria-current=page]{color:var(--brand);border-color:var(--brand)}
.center{max-width:460px;margin:6vh auto 0}
.row.centered{justify-content:center}
.empty{text-align:center;padding:32px 16px}
.approval-list,.delivery-list{list-style:none;margin:0;padding:0;display:grid;gap:12px}
.approval .big{font-size:1.6rem}
.countdown:empty{display:none}
.approval .expired .countdown{background:var(--bad-bg);color:var(--bad)}
.excerpt{white-space:pre-wrap;word-break:break-all;overflow-wrap:anywhere;max-width:100%;margin:0;background:var(--bg);border-radius:8px;padding:10px;font-size:13px;max-height:240px;overflow:auto}
.card-picture{max-width:420px;aspect-ratio:1.586;border-radius:16px;padding:18px;background:linear-gradient(135deg,#3b5bdb,#1d2433);color:#fff;display:flex;flex-direction:column;justify-content:space-between;box-shadow:0 6px 18px rgba(29,36,51,.25)}
.card-picture .chip{width:44px;height:32px;border-radius:6px;background:linear-gradient(135deg,#ffd43b,#f08c00)}
.card-number{display:flex;flex-wrap:nowrap;align-items:center;gap:2px;font:600 clamp(15px,4.6vw,22px)/1 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.card-number .gap{width:8px;flex:none}
.card-number .masked{width:.9em;text-align:center;opacity:.75}
.card-picture input{width:1.5em;padding:4px 0;text-align:center;border-radius:6px;border:2px solid #ffd43b;background:#fff;color:var(--ink);font:inherit;min-width:0}
.card-picture .expiry{display:flex;align-items:center;gap:4px;font:600 16px/1 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.card-picture .expiry input.mm{width:3em}.card-picture .expiry input.yy{width:4.4em}
.card-caption{display:block;font-size:11px;text-transform:uppercase;letter-spacing:.08em;opacity:.8;margin-bottom:4px}
.profile-list{list-style:none;margin:0;padding:0;display:grid;gap:12px}
.profile-item{border:1px solid var(--line);border-radius:10px;padding:12px}
.profile-form{display:grid;grid-template-columns:repeat(auto-fit,minmax(230px,1fr));gap:10px;align-items:end}
.profile-form .field{margin:0;min-width:0}
.profile-form select,.profile-form input{max-width:none}
.steps{list-style:none;margin:0 0 16px;padding:0;display:flex;gap:6px;flex-wrap:wrap;counter-reset:step}
.steps li{flex:1 1 0;min-width:90px;padding:8px 10px;border-radius:8px;background:var(--card);border:1px solid var(--line);color:var(--muted);font-size:14px;counter-increment:step}
.steps li::before{content:counter(step);display:inline-grid;place-items:center;width:22px;height:22px;margin-right:6px;border-radius:50%;background:var(--line);color:var(--ink);font-weight:700;font-size:12px}
.steps li[aria-current=step]{border-color:var(--brand);color:var(--brand);font-weight:600}
.steps li[aria-current=step]::before{background:var(--brand);color:#fff}
.steps li.done::before{content:"✓";background:var(--ok);color:#fff}
.filters{display:flex;flex-wrap:wrap;gap:6px;margin:0 0 12px}
.filters a{padding:4px 12px;border-radius:999px;border:1px solid var(--line);background:var(--card);text-decoration:none;color:var(--muted);font-size:14px}
.filters a[aria-current=page]{border-color:var(--brand);color:var(--brand);font-weight:600}
footer{max-width:1040px;margin:0 auto;padding:0 16px 32px;color:var(--muted);font-size:13px}
@media (max-width:719px){
  .rt thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
  .rt,.rt tbody{display:block;width:100%}
  .rt tr{display:flex;flex-wrap:wrap;align-items:baseline;gap:2px 12px;padding:10px 0;border-bottom:1px solid var(--line)}
  .rt td{display:block;border:0;padding:0;flex:1 1 100%;min-width:0;text-align:left;overflow-wrap:anywhere}
  .rt td.num{text-align:left;white-space:normal}
  .rt td.k{flex:1 1 auto}
  .rt td.k.num{font-weight:700}
  .rt td.k~td.k{flex:0 0 auto;text-align:right}
  .rt td:not(.k){position:relative;padding-left:7.5rem}
  .rt td:not(.k)::before{content:attr(data-label);position:absolute;left:0;top:.15em;width:7rem;color:var(--muted);font-size:13px;font-weight:400;overflow-wrap:normal}
  .rt td:empty{display:none}
  .rt tr.sub{padding-top:0}
  .rt tr.sub td::before,.rt td[data-label=""]::before{display:none}
  .rt tr.sub td,.rt td[data-label=""]{padding-left:0}
  .rt tbody[data-testid]{border-bottom:1px solid var(--line)}
  .rt tbody[data-testid] tr{border-bottom:0}
  table.dense td{font-size:14px}
  .steps{gap:4px}
  .steps li{font-size:12px;padding:6px;min-width:0;text-align:center}
  .steps li::before{display:grid;margin:0 auto 2px}
}
@media (min-width:720px){
  td .when time{white-space:nowrap}
  .grid.two{grid-template-columns:1fr 1fr}
  .grid.three{grid-template-columns:repeat(3,1fr)}
  .facts{grid-template-columns:repeat(4,minmax(0,1fr))}
  h1{font-size:1.9rem}
  .center .facts{grid-template-columns:repeat(2,minmax(0,1fr))}
}

`;
