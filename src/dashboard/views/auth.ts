import { html, type SafeHtml } from '../html.ts';
import type { MagicLinkState } from '../sessions.ts';
import { csrfField, messageBody, messageView, type PageView } from './layout.ts';

// Sign-in by e-mail magic link: the form, the check-your-mail page, the confirmation step that
// uses the link, and the problems a link can have.

export function signInView(values: {
  csrf: string;
  email?: string;
  next?: string;
  claimToken?: string;
  notice?: SafeHtml;
}): PageView {
  const body = html`<div class="card stack">
  <h1>Sign in</h1>
  <p class="lead">Enter your e-mail address and we'll send you a link that signs you in. No password needed.</p>
  ${values.notice ?? ''}
  <form method="post" action="/signin">
    ${csrfField(values.csrf)}
    ${values.next ? html`<input type="hidden" name="next" value="${values.next}">` : ''}
    ${values.claimToken ? html`<input type="hidden" name="claim_token" value="${values.claimToken}">` : ''}
    <div class="field"><label for="email">E-mail address</label>
      <input id="email" name="email" type="email" autocomplete="email" required maxlength="254" value="${values.email ?? ''}"></div>
    <button type="submit">Send me a sign-in link</button>
  </form>
</div>`;
  return { title: 'Sign in', narrow: true, noSession: true, body };
}

/** After the form: the address typed (when the flash carried it), so a typo shows. */
export function checkEmailView(email: string | undefined): PageView {
  return {
    title: 'Check your e-mail',
    narrow: true,
    noSession: true,
    body: messageBody(
      'Check your e-mail',
      html`We sent a sign-in link to ${email ? html`<strong data-testid="sent-to">${email}</strong>` : 'the address you gave'}. Open it on this device or any other; it works once, for 15 minutes.
              <br><span class="small">Nothing arrived after a few minutes? Check the spam folder${email ? ' and the spelling of the address above' : ' or the spelling of the address'}.</span>`,
      html`<a class="button secondary" href="/signin">Use another address</a>`,
    ),
  };
}

/** Using the link takes a button press: mail scanners that fetch links must not burn it. */
export function verifyView(csrf: string, token: string): PageView {
  return {
    title: 'Sign in',
    narrow: true,
    noSession: true,
    body: messageBody(
      'Finish signing in',
      'Press the button to sign in on this device.',
      html`<form method="post" action="/signin/verify">${csrfField(csrf)}
              <input type="hidden" name="token" value="${token}">
              <button type="submit">Sign in</button></form>`,
    ),
  };
}

export function linkProblemView(state: Exclude<MagicLinkState, 'valid'>): { status: number; view: PageView } {
  const problem = linkProblem(state);
  return { status: problem.status, view: { ...problem.view, noSession: true } };
}

function linkProblem(state: Exclude<MagicLinkState, 'valid'>): { status: number; view: PageView } {
  const again = html`<a class="button" href="/signin">Get a new link</a>`;
  if (state === 'expired')
    return {
      status: 410,
      view: messageView(
        'This link has expired',
        'Sign-in links work for 15 minutes. Ask for a new one; it only takes a moment.',
        { actions: again },
      ),
    };
  if (state === 'used')
    return {
      status: 410,
      view: messageView(
        'This link was already used',
        'Each sign-in link works once. If you are not signed in, ask for a new link.',
        { actions: again },
      ),
    };
  return {
    status: 400,
    view: messageView(
      'This link is not valid',
      'The link may be incomplete (some mail apps break long links). Ask for a new one.',
      { actions: again },
    ),
  };
}
