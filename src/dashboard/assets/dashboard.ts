// The dashboard's shared script (served as /assets/dashboard.js on every page; progressive
// enhancement only, every page works without it):
// - beside each time the server wrote in UTC, the relative time and the time in this browser's zone;
// - Copy buttons for keys, secrets and codes;
// - a live warning on limit forms when a smaller limit is above a larger one (per purchase ≤ per
//   day ≤ per month); the server says the same after saving.

function relative(ms: number): string {
  const future = ms < 0;
  const s = Math.round(Math.abs(ms) / 1000);
  const say = (n: number, unit: string) => {
    const text = `${n} ${unit}${n === 1 || unit === 'min' ? '' : 's'}`;
    return future ? `in ${text}` : `${text} ago`;
  };
  if (s < 45) return future ? 'in a moment' : 'just now';
  if (s < 3600) return say(Math.round(s / 60), 'min');
  if (s < 86_400) return say(Math.round(s / 3600), 'hour');
  if (s < 30 * 86_400) return say(Math.round(s / 86_400), 'day');
  return '';
}

function localText(date: Date): string {
  const sameDay = date.toDateString() === new Date().toDateString();
  const time = date.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
  if (sameDay) return `${time} your time`;
  return `${date.toLocaleDateString(undefined, { day: 'numeric', month: 'short' })}, ${time} your time`;
}

function updateTimes(): void {
  const sameZone = new Date().getTimezoneOffset() === 0;
  document.querySelectorAll<HTMLTimeElement>('.when > time[datetime]').forEach((el) => {
    const date = new Date(el.dateTime);
    if (Number.isNaN(date.getTime())) return;
    const parts = [relative(Date.now() - date.getTime())];
    if (!sameZone) parts.push(localText(date));
    const text = parts.filter(Boolean).join(' · ');
    let out = el.parentElement?.querySelector<HTMLElement>('.rel');
    if (!out) {
      out = document.createElement('span');
      out.className = 'rel';
      el.after(out);
    }
    out.textContent = text;
    el.title = date.toString();
  });
}

function setUpCopy(): void {
  document.querySelectorAll<HTMLButtonElement>('button.copy[data-copy]').forEach((button) => {
    button.hidden = false;
    button.addEventListener('click', async () => {
      const value = button.dataset.copy ?? '';
      try {
        await navigator.clipboard.writeText(value);
        button.textContent = 'Copied';
      } catch {
        // No clipboard access (plain http, permissions): select the text for Ctrl+C instead.
        const text = button.previousElementSibling;
        if (text) window.getSelection()?.selectAllChildren(text);
        button.textContent = 'Selected: press Ctrl+C';
      }
      setTimeout(() => {
        button.textContent = 'Copy';
      }, 2500);
    });
  });
}

function amount(input: HTMLInputElement | null): number | undefined {
  const text = (input?.value ?? '')
    .trim()
    .replace(/^\$\s*/, '')
    .replace(/,/g, '');
  if (!/^\d+(\.\d{1,2})?$/.test(text)) return undefined;
  return Number(text);
}

function setUpLimitChecks(): void {
  document.querySelectorAll<HTMLFormElement>('form[data-limits]').forEach((form) => {
    const warning = form.querySelector<HTMLElement>('.limit-warning');
    const fields = ['per', 'day', 'month'].map((name) =>
      form.querySelector<HTMLInputElement>(`[data-limit="${name}"]`),
    );
    const check = () => {
      if (!warning) return;
      const [per, day, month] = fields.map(
        (f) => amount(f) ?? (f?.dataset.current ? Number(f.dataset.current) : undefined),
      );
      const problems: string[] = [];
      if (per !== undefined && day !== undefined && per > day) problems.push('per purchase is above per day');
      if (day !== undefined && month !== undefined && day > month)
        problems.push('per day is above per month');
      if (per !== undefined && month !== undefined && per > month && !problems.length)
        problems.push('per purchase is above per month');
      warning.hidden = problems.length === 0;
      warning.textContent = problems.length
        ? `Check the limits: ${problems.join(' and ')}, so the larger limit can never be reached.`
        : '';
    };
    for (const f of fields) f?.addEventListener('input', check);
    check();
  });
}

updateTimes();
setInterval(updateTimes, 30_000);
setUpCopy();
setUpLimitChecks();
