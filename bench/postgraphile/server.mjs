// PostGraphile 5 as the benchmark harness runs it beside ephemera (part
// `peer` of scripts/bench): the Amber preset, the `public` schema of the
// database the harness seeded, read through a read-only role, no GraphiQL,
// no watch mode, ten pooled connections (as many as ephemera's queries get).
//
// Settings come from the environment: DATABASE_URL (the read-only role's
// URL) and PORT (on 127.0.0.1). It prints "ready" once it listens.
import { createServer } from "node:http";
import { postgraphile } from "postgraphile";
import { grafserv } from "postgraphile/grafserv/node";
import { PostGraphileAmberPreset } from "postgraphile/presets/amber";
import { makePgService } from "postgraphile/adaptors/pg";

const port = Number(process.env.PORT);
const preset = {
  extends: [PostGraphileAmberPreset],
  pgServices: [
    makePgService({
      connectionString: process.env.DATABASE_URL,
      schemas: ["public"],
      poolConfig: { max: 10 },
    }),
  ],
  grafserv: { port, graphiql: false, watch: false },
  grafast: { explain: false },
};

const pgl = postgraphile(preset);
const serv = pgl.createServ(grafserv);
const server = createServer();
server.on("error", (e) => {
  console.error(e);
  process.exit(1);
});
await serv.addTo(server);
server.listen(port, "127.0.0.1", () => console.log("ready"));
