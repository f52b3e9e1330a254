// The approvals countdown (served as /assets/countdown.js on the inbox and the one-click page;
// progressive enhancement): each `[data-left]` element (seconds left when the page was rendered)
// gets a live timer in its `.countdown`; at zero it says so and disables the card's buttons.

const items = Array.from(document.querySelectorAll<HTMLElement>('[data-left]'));
if (items.length > 0) {
  const start = Date.now();
  const tick = () => {
    const elapsed = (Date.now() - start) / 1000;
    for (const el of items) {
      const left = Math.round(Number(el.getAttribute('data-left')) - elapsed);
      const out = el.querySelector('.countdown');
      if (!out) continue;
      if (left <= 0) {
        out.textContent = 'expired (reload the page)';
        el.classList.add('expired');
        const card = el.closest('.approval');
        if (card) {
          for (const b of Array.from(card.querySelectorAll('button'))) b.disabled = true;
        }
      } else {
        const m = Math.floor(left / 60);
        const s = left % 60;
        out.textContent = `${m}:${s < 10 ? '0' : ''}${s} left`;
      }
    }
  };
  tick();
  setInterval(tick, 1000);
}
