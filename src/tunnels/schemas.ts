import { Type } from '@sinclair/typebox';

// HTTP schemas of the tunnel routes (routes.ts): the client's WebSocket upgrade, the owner's token
// rotation and tunnel settings; handler types are their Static<> types through the TypeBox type
// provider.

export const ConnectHeaders = Type.Object({ authorization: Type.Optional(Type.String()) });
export const SwitchingProtocols = Type.Null({ description: 'Switching Protocols: the WebSocket is open' });

export const TunnelTokenResponse = Type.Object({
  bot_id: Type.String(),
  tunnel_token: Type.String(),
  tunnel_client_command: Type.String(),
  note: Type.String(),
});

export const TunnelSettings = Type.Object({
  bot_id: Type.String(),
  webhook_url: Type.String(),
  webhook_path: Type.String(),
  local_port: Type.Integer(),
  forward: Type.Union([Type.Literal('webhook_only'), Type.Literal('all')], {
    description:
      '`webhook_only` (default): the tunnel forwards only POST requests to webhook_path; other paths are 404, other methods 405, and never reach the bot. `all`: any method and path.',
  }),
});

export const TunnelForwardBody = Type.Object(
  { forward: Type.Union([Type.Literal('webhook_only'), Type.Literal('all')]) },
  { additionalProperties: false },
);
