// nsqjs (NSQ's Node.js client), unchanged, for bench/replication_clients.py: a Writer publishes COUNT messages to
// one nsqd, each awaiting its OK, then says "published" on stderr; a Reader that finds every nsqd through lookupd
// prints each message's body on stdout and finishes it.
//   node failover.js NSQD_TCP LOOKUPD_HTTP TOPIC CHANNEL COUNT
const nsq = require('nsqjs');

const [publishTo, lookupd, topic, channel, count] = process.argv.slice(2);

const reader = new nsq.Reader(topic, channel, {lookupdHTTPAddresses: [lookupd], maxInFlight: 100,
                                               lookupdPollInterval: 1});
reader.on('message', (message) => {
  process.stdout.write(message.body.toString() + '\n');
  message.finish();
});
reader.on('nsqd_connected', (host, port) => process.stderr.write(`connected ${host}:${port}\n`));
reader.connect();

const [host, port] = publishTo.split(':');
const writer = new nsq.Writer(host, Number(port));
writer.on('ready', async () => {
  for (let number = 0; number < Number(count); number++) {
    await new Promise((resolve, reject) => writer.publish(topic, `nsqjs ${number}`,
                                                          (error) => (error ? reject(error) : resolve())));
  }
  process.stderr.write('published\n');
});
writer.on('error', (error) => process.stderr.write(`writer: ${error}\n`));
writer.connect();
