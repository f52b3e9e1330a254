import { randomInt } from 'node:crypto';

// Decision personas of a card's profiles (docs/security.md, "Decisions of held purchases"). Drawn
// once per profile when the card is activated, from a model of how owners decide held purchases:
// most answer within minutes (the median delay is log-normal around 100 seconds), some are slow,
// some deny often, some mostly let holds expire. Before the service has seen the owner decide,
// a held decoy is decided like its profile's persona, so the six profiles behave like six plausible
// people and the real one is not the odd one out; decoy_decision_sample (migration 0010) then moves
// decoys towards the owner's own decisions as they accumulate.

export interface Persona {
  persona_delay_ms: number;
  persona_sigma: number;
  persona_deny: number;
  persona_expire: number;
}

const uniform = () => randomInt(1_000_000) / 1_000_000;
const gauss = () => Math.sqrt(-2 * Math.log(1 - uniform())) * Math.cos(2 * Math.PI * uniform());

export function drawPersona(): Persona {
  const absent = uniform() < 0.15;
  const expire = absent ? 0.5 + 0.45 * uniform() : 0.12 * uniform();
  return {
    persona_delay_ms: Math.round(Math.min(720_000, Math.max(5_000, 100_000 * Math.exp(1.2 * gauss())))),
    persona_sigma: 0.3 + 0.5 * uniform(),
    persona_deny: (1 - expire) * (uniform() < 0.2 ? 0.3 + 0.4 * uniform() : 0.15 * uniform()),
    persona_expire: expire,
  };
}
