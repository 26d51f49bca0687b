#!/usr/bin/perl

# ssl_key_log and proxy_ssl_key_log: the handshakes' secrets appended in
# the NSS key log format (as nginx 1.27.2 and later), the file opened by
# the master; a TLS 1.3 handshake through a proxy leaves the same client
# random in the server's file and in the proxy's; TLS 1.2 writes
# CLIENT_RANDOM lines. -t reports a file that cannot be opened.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::Ssl qw/need_openssl openssl_in/;

need_openssl();
`curl --version 2>&1` =~ /^curl/ or plan(skip_all => 'no curl');

my $t = Test::Sluice->new()->has(qw/http/)->plan(6);
my $d = $t->testdir();

openssl_in($d, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
	. "-keyout s.key -out s.crt -days 3 -subj /CN=s");

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl;
        ssl_certificate s.crt;
        ssl_certificate_key s.key;
        ssl_key_log server.keys;
        location / { return 200 "tls"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / {
            proxy_pass https://127.0.0.1:%%PORT_8443%%;
            proxy_ssl_protocols TLSv1.3;
            proxy_ssl_key_log client.keys;
        }
    }
}

EOF

$t->run();

my $p = port(8080);
like(`curl -s -m 10 http://127.0.0.1:$p/`, qr/^tls$/, 'proxied over TLS');

my $line = qr/^[A-Z_0-9]+ [0-9a-f]{64} [0-9a-f]{64,96}$/;
my $ok = $t->waitforfile("$d/client.keys") && $t->waitforlog(qr/CLIENT_TRAFFIC_SECRET_0/, 5, 'client.keys');
my $client = $t->read_file('client.keys') // '';
my $server = $t->read_file('server.keys') // '';
ok($ok && (grep { !/$line/ } split /\n/, $client) == 0, 'proxy_ssl_key_log: NSS key log lines');
my ($random) = $client =~ /^CLIENT_HANDSHAKE_TRAFFIC_SECRET ([0-9a-f]{64}) /m;
ok($random && $server =~ /^SERVER_HANDSHAKE_TRAFFIC_SECRET $random [0-9a-f]+$/m,
	'ssl_key_log: the same handshake in the server\'s file');

$p = port(8443);
like(`curl -sk -m 10 --tls-max 1.2 https://127.0.0.1:$p/`, qr/^tls$/, 'TLS 1.2');
ok($t->waitforlog(qr/^CLIENT_RANDOM [0-9a-f]{64} [0-9a-f]{96}$/m, 5, 'server.keys'), 'TLS 1.2: CLIENT_RANDOM');

$t->write_file('t.conf', "events { }\nhttp {\nserver {\nssl_key_log /nonexistent/k.log;\n}\n}\n");
my (undef, undef, $err) = $t->run_binary('-p', "$d/", '-c', 't.conf', '-e', 'stderr', '-t');
like($err, qr!\[emerg\] .*open\(\) "/nonexistent/k\.log" failed \(2: No such file or directory\) in \Q$d\E/t\.conf:4!,
	'unopenable key log');
